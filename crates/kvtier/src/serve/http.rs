//! The little HTTP/1.1 the `/metrics` endpoint (and its `/healthz` and
//! `/readyz`) speaks: where a request
//! head ends, what it asks for, and the whole response to it (always with
//! `Content-Length` and `Connection: close`).  No I/O here; the server
//! (`server.rs`) reads and writes.

use std::sync::Arc;

use super::MetricsSource;

/// The `Content-Type` of the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `GET` or `HEAD` of `/metrics`: the manager's text.
    Metrics,
    /// `GET` or `HEAD` of `/healthz`: whether the manager answers.
    Health,
    /// `GET` or `HEAD` of `/readyz`: whether every tier can be used.
    Ready,
    /// Another path: 404.
    NotFound,
    /// A known path with a method other than `GET` or `HEAD`: 405.
    MethodNotAllowed,
    /// Not an HTTP/1.x request line: 400.
    BadRequest,
    /// No end of the head within the cap: 431.
    HeadTooLarge,
}

/// A request as read: its answer, and whether the response carries a body
/// (not for `HEAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Request {
    pub answer: Answer,
    pub body: bool,
}

/// Where the head in `buf` ends (the index after its empty line: `\n\n`
/// or `\n\r\n`), if it does; `from` is how far earlier calls looked (the
/// search restarts 2 bytes before it, so a terminator split across reads
/// is found).
pub(crate) fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    let start = from.saturating_sub(2);
    (start..buf.len()).find_map(|i| match &buf[i..] {
        [b'\n', b'\n', ..] => Some(i + 2),
        [b'\n', b'\r', b'\n', ..] => Some(i + 3),
        _ => None,
    })
}

/// What the complete head `head` asks for.
pub(crate) fn parse(head: &[u8]) -> Request {
    let bad = Request {
        answer: Answer::BadRequest,
        body: true,
    };
    // Empty lines before the request line are allowed (RFC 9112 2.2).
    let start = head
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(head.len());
    let line = head[start..].split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let Ok(line) = std::str::from_utf8(line) else {
        return bad;
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad;
    };
    if method.is_empty() || target.is_empty() || !version.starts_with("HTTP/1.") {
        return bad;
    }
    let head_only = method == "HEAD";
    let path = target.split('?').next().unwrap_or("");
    let found = match path {
        "/metrics" => Answer::Metrics,
        "/healthz" => Answer::Health,
        "/readyz" => Answer::Ready,
        _ => Answer::NotFound,
    };
    let answer = if found == Answer::NotFound || method == "GET" || head_only {
        found
    } else {
        Answer::MethodNotAllowed
    };
    Request {
        answer,
        body: !head_only,
    }
}

/// The bytes of the response to `request`; `source` gives what it is
/// about, if the request asks for it (`None`: it is gone).
pub(crate) fn respond(
    request: Request,
    source: impl FnOnce() -> Option<Arc<dyn MetricsSource>>,
) -> Vec<u8> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    const UNAVAILABLE: &str = "503 Service Unavailable";
    const GONE: &str = "the manager is gone\n";
    let (status, content_type, text) = match request.answer {
        Answer::Health => match source().map(|s| s.health()) {
            Some(Ok(())) => ("200 OK", PLAIN, "ok\n".to_string()),
            Some(Err(e)) => (UNAVAILABLE, PLAIN, format!("unhealthy: {e}\n")),
            None => (UNAVAILABLE, PLAIN, GONE.to_string()),
        },
        Answer::Ready => match source().map(|s| s.readiness()) {
            Some(Ok(r)) if r.is_ready() => ("200 OK", PLAIN, "ready\n".to_string()),
            Some(Ok(r)) => (UNAVAILABLE, PLAIN, format!("not ready:\n{r}")),
            Some(Err(e)) => (UNAVAILABLE, PLAIN, format!("readiness unavailable: {e}\n")),
            None => (UNAVAILABLE, PLAIN, GONE.to_string()),
        },
        Answer::Metrics => match source().map(|s| s.prometheus_text()) {
            Some(Ok(text)) => ("200 OK", CONTENT_TYPE, text),
            Some(Err(e)) => (
                "503 Service Unavailable",
                CONTENT_TYPE,
                format!("metrics unavailable: {e}\n"),
            ),
            None => (
                "503 Service Unavailable",
                CONTENT_TYPE,
                "the manager is gone\n".to_string(),
            ),
        },
        Answer::NotFound => ("404 Not Found", PLAIN, NOT_FOUND.to_string()),
        Answer::MethodNotAllowed => ("405 Method Not Allowed", PLAIN, NOT_FOUND.to_string()),
        Answer::BadRequest => ("400 Bad Request", PLAIN, "bad request\n".to_string()),
        Answer::HeadTooLarge => (
            "431 Request Header Fields Too Large",
            PLAIN,
            "request head too large\n".to_string(),
        ),
    };
    let allow = if request.answer == Answer::MethodNotAllowed {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         {allow}Connection: close\r\n\r\n",
        text.len()
    )
    .into_bytes();
    if request.body {
        out.extend_from_slice(text.as_bytes());
    }
    out
}

const NOT_FOUND: &str = "not found: try GET /metrics, /healthz or /readyz\n";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::tiering::Readiness;

    fn answer(head: &str) -> Request {
        parse(head.as_bytes())
    }

    #[test]
    fn head_end_finds_crlf_and_lf_terminators_split_across_reads() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest", 0), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nrest", 0), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n", 0), None);
        // The terminator's first bytes came in an earlier read.
        let buf = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(head_end(buf, 16), Some(18));
        assert_eq!(head_end(buf, 17), Some(18));
        assert_eq!(head_end(b"\n\n", 0), Some(2));
    }

    #[test]
    fn requests_are_routed_by_path_then_method() {
        let get = answer("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(
            get,
            Request {
                answer: Answer::Metrics,
                body: true
            }
        );
        assert_eq!(answer("GET /metrics?x=1 HTTP/1.0\r\n\r\n"), get);
        assert_eq!(answer("\r\nGET /metrics HTTP/1.1\r\n\r\n"), get);
        assert_eq!(
            answer("HEAD /metrics HTTP/1.1\r\n\r\n"),
            Request {
                answer: Answer::Metrics,
                body: false
            }
        );
        assert_eq!(
            answer("HEAD / HTTP/1.1\r\n\r\n"),
            Request {
                answer: Answer::NotFound,
                body: false
            }
        );
        assert_eq!(answer("GET / HTTP/1.1\r\n\r\n").answer, Answer::NotFound);
        assert_eq!(
            answer("GET /metricsx HTTP/1.1\r\n\r\n").answer,
            Answer::NotFound
        );
        assert_eq!(answer("POST / HTTP/1.1\r\n\r\n").answer, Answer::NotFound);
        assert_eq!(
            answer("POST /metrics HTTP/1.1\r\n\r\n").answer,
            Answer::MethodNotAllowed
        );
        assert_eq!(
            answer("get /metrics HTTP/1.1\r\n\r\n").answer,
            Answer::MethodNotAllowed,
            "methods are case-sensitive"
        );
    }

    #[test]
    fn the_probes_are_routed_like_metrics() {
        for (path, want) in [("/healthz", Answer::Health), ("/readyz", Answer::Ready)] {
            assert_eq!(answer(&format!("GET {path} HTTP/1.1\r\n\r\n")).answer, want);
            assert_eq!(
                answer(&format!("HEAD {path}?x HTTP/1.0\r\n\r\n")),
                Request {
                    answer: want,
                    body: false
                }
            );
            assert_eq!(
                answer(&format!("PUT {path} HTTP/1.1\r\n\r\n")).answer,
                Answer::MethodNotAllowed
            );
        }
        assert_eq!(
            answer("GET /health HTTP/1.1\r\n\r\n").answer,
            Answer::NotFound
        );
    }

    /// A source with fixed answers.
    struct Fixed(
        fn() -> crate::error::Result<()>,
        fn() -> crate::error::Result<Readiness>,
    );

    impl MetricsSource for Fixed {
        fn prometheus_text(&self) -> crate::error::Result<String> {
            Ok(String::new())
        }
        fn health(&self) -> crate::error::Result<()> {
            (self.0)()
        }
        fn readiness(&self) -> crate::error::Result<Readiness> {
            (self.1)()
        }
    }

    fn probe(answer: Answer, source: Fixed) -> String {
        let source: Arc<dyn MetricsSource> = Arc::new(source);
        let out = respond(Request { answer, body: true }, || Some(source));
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn probes_answer_200_or_503_with_the_reasons() {
        let ready = || Ok(Readiness::default());
        let r = probe(Answer::Health, Fixed(|| Ok(()), ready));
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\nok\n"),
            "{r}"
        );
        let busy = || Err(Error::Timeout("slow".into()));
        let r = probe(Answer::Health, Fixed(busy, ready));
        assert!(
            r.starts_with("HTTP/1.1 503 ") && r.contains("\r\n\r\nunhealthy: "),
            "{r}"
        );
        let r = probe(Answer::Ready, Fixed(|| Ok(()), ready));
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\nready\n"),
            "{r}"
        );
        let two = || {
            Ok(Readiness {
                reasons: vec!["tier 1 (a): x".to_string(), "tier 2 (b): y".to_string()],
            })
        };
        let r = probe(Answer::Ready, Fixed(|| Ok(()), two));
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
        assert!(
            r.ends_with("\r\n\r\nnot ready:\ntier 1 (a): x\ntier 2 (b): y\n"),
            "{r}"
        );
        let fails = || Err(Error::Reentrant("r".into()));
        let r = probe(Answer::Ready, Fixed(|| Ok(()), fails));
        assert!(
            r.starts_with("HTTP/1.1 503 ") && r.contains("readiness unavailable: "),
            "{r}"
        );
        for answer in [Answer::Health, Answer::Ready] {
            let r = text(Request { answer, body: true });
            assert!(
                r.starts_with("HTTP/1.1 503 ") && r.ends_with("the manager is gone\n"),
                "{r}"
            );
        }
    }

    #[test]
    fn lines_that_are_not_http_1_requests_are_bad_requests() {
        for head in [
            "GET /metrics\r\n\r\n",
            "GET /metrics HTTP/2.0\r\n\r\n",
            "GET  /metrics HTTP/1.1\r\n\r\n",
            "GET /metrics HTTP/1.1 x\r\n\r\n",
            " /metrics HTTP/1.1\r\n\r\n",
            "\r\n\r\n",
        ] {
            assert_eq!(answer(head).answer, Answer::BadRequest, "{head:?}");
        }
        assert_eq!(
            parse(b"GET /\xff HTTP/1.1\r\n\r\n").answer,
            Answer::BadRequest
        );
    }

    fn text(request: Request) -> String {
        String::from_utf8(respond(request, || None)).unwrap()
    }

    #[test]
    fn responses_carry_length_and_close_and_head_has_no_body() {
        let r = text(Request {
            answer: Answer::NotFound,
            body: true,
        });
        assert_eq!(
            r,
            format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{NOT_FOUND}",
                NOT_FOUND.len()
            )
        );
        let r = text(Request {
            answer: Answer::MethodNotAllowed,
            body: false,
        });
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
        assert!(r.contains("\r\nAllow: GET, HEAD\r\n"), "{r}");
        assert!(
            r.ends_with("Connection: close\r\n\r\n"),
            "HEAD: no body: {r}"
        );
        let r = text(Request {
            answer: Answer::Metrics,
            body: true,
        });
        assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{r}");
        assert!(
            r.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")),
            "{r}"
        );
        assert!(r.ends_with("\r\n\r\nthe manager is gone\n"), "{r}");
        for (answer, status) in [
            (Answer::BadRequest, "400 Bad Request"),
            (Answer::HeadTooLarge, "431 Request Header Fields Too Large"),
        ] {
            let r = text(Request { answer, body: true });
            assert!(r.starts_with(&format!("HTTP/1.1 {status}\r\n")), "{r}");
            assert!(!r.contains("Allow:"), "{r}");
        }
    }
}
