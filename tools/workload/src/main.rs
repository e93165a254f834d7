//! kvtier-workload: writes the deterministic multi-turn chat workload that
//! the benchmarks replay.
//!
//!     kvtier-workload [--preset small|medium|large] [--seed N] [--out FILE]
//!
//! The output is byte-identical to the reference generator's for every
//! preset and seed: one `R <req_id> <n_keys> <key_hex>...` line per
//! request, after one `#` comment line.  A key is 12 bytes: an 8-byte
//! chained block hash (BLAKE2b with an 8-byte digest of the parent hash and
//! the block's content id), then a 4-byte big-endian KV-group index (0).
//!
//! Model: P system prompts shared across conversations; C conversations,
//! each with a random number of turns; every turn's request is the system
//! prompt, the whole history and the new user blocks, and the history then
//! grows by the user blocks and the reply blocks.  Conversations are
//! interleaved in a seeded random order.
//!
//! The random choices reproduce Python's `random.Random(seed)` exactly:
//! MT19937 seeded by `init_by_array` from the seed's 32-bit words, and
//! integers drawn by rejection sampling on `getrandbits(k)` with
//! `k = n.bit_length()`.

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use blake2::{Blake2b, Digest, digest::consts::U8};

/// One preset: system prompts, conversations, most turns per conversation,
/// and the inclusive range of system-prompt lengths in blocks.
struct Preset {
    name: &'static str,
    prompts: usize,
    conversations: usize,
    max_turns: u64,
    prompt_blocks: (u64, u64),
}

/// The presets, sorted by name as the reference generator lists them.
const PRESETS: [Preset; 3] = [
    Preset {
        name: "large",
        prompts: 8,
        conversations: 20000,
        max_turns: 8,
        prompt_blocks: (8, 64),
    },
    Preset {
        name: "medium",
        prompts: 4,
        conversations: 2000,
        max_turns: 8,
        prompt_blocks: (8, 32),
    },
    Preset {
        name: "small",
        prompts: 2,
        conversations: 200,
        max_turns: 6,
        prompt_blocks: (4, 16),
    },
];

/// MT19937 with Python's seeding and integer sampling on top.
struct PyRandom {
    state: [u32; 624],
    index: usize,
}

impl PyRandom {
    /// `random.Random(seed)` for an integer seed given as the 32-bit words of
    /// its absolute value, least significant first (at least one word).
    fn from_words(key: &[u32]) -> PyRandom {
        let mut mt = [0u32; 624];
        mt[0] = 19_650_218;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..624.max(key.len()) {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= 624 {
                mt[0] = mt[623];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..623 {
            mt[i] = (mt[i] ^ (mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_mul(1_566_083_941))
                .wrapping_sub(i as u32);
            i += 1;
            if i >= 624 {
                mt[0] = mt[623];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        PyRandom {
            state: mt,
            index: 624,
        }
    }

    /// The next 32-bit output of MT19937.
    fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            let mt = &mut self.state;
            for k in 0..624 {
                let y = (mt[k] & 0x8000_0000) | (mt[(k + 1) % 624] & 0x7fff_ffff);
                let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
                mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ mag;
            }
            self.index = 0;
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `getrandbits(k)` for `1 <= k <= 64`: whole 32-bit words, least
    /// significant first, the last one cut to the bits still wanted.
    fn getrandbits(&mut self, k: u32) -> u64 {
        debug_assert!((1..=64).contains(&k));
        if k <= 32 {
            return u64::from(self.next_u32() >> (32 - k));
        }
        let low = u64::from(self.next_u32());
        let high = u64::from(self.next_u32() >> (64 - k));
        low | (high << 32)
    }

    /// `_randbelow(n)` for `n > 0`: rejection sampling on `getrandbits`.
    fn randbelow(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let k = 64 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `randint(a, b)`: uniform in `a..=b`.
    fn randint(&mut self, a: u64, b: u64) -> u64 {
        a + self.randbelow(b - a + 1)
    }
}

/// A parsed `--seed`: Python's `int()` of the argument.
struct Seed {
    negative: bool,
    /// Decimal digits of the absolute value, no leading zeros ("0" for zero).
    digits: String,
}

impl Seed {
    /// Parses a decimal integer the way Python's `int()` does: surrounding
    /// whitespace, an optional sign, and single underscores between digits.
    fn parse(text: &str) -> Option<Seed> {
        let t = text.trim();
        let (negative, body) = match t.as_bytes().first()? {
            b'-' => (true, &t[1..]),
            b'+' => (false, &t[1..]),
            _ => (false, t),
        };
        if body.is_empty() || body.starts_with('_') || body.ends_with('_') || body.contains("__") {
            return None;
        }
        let mut digits = String::with_capacity(body.len());
        for c in body.chars() {
            match c {
                '0'..='9' => digits.push(c),
                '_' => {}
                _ => return None,
            }
        }
        let trimmed = digits.trim_start_matches('0');
        let digits = if trimmed.is_empty() { "0" } else { trimmed }.to_string();
        let negative = negative && digits != "0";
        Some(Seed { negative, digits })
    }

    /// The value as Python prints it.
    fn display(&self) -> String {
        if self.negative {
            format!("-{}", self.digits)
        } else {
            self.digits.clone()
        }
    }

    /// The 32-bit words of the absolute value, least significant first, at
    /// least one: the key Python seeds MT19937 with.
    fn words(&self) -> Vec<u32> {
        let mut words: Vec<u32> = vec![0];
        for d in self.digits.bytes() {
            let mut carry = u64::from(d - b'0');
            for w in words.iter_mut() {
                let v = u64::from(*w) * 10 + carry;
                *w = v as u32;
                carry = v >> 32;
            }
            if carry > 0 {
                words.push(carry as u32);
            }
        }
        words
    }
}

/// An 8-byte chained block hash.
type BlockHash = [u8; 8];

/// The hash of a block with content id `content` whose parent hash is
/// `parent`: BLAKE2b-64 of `parent || content as 8 big-endian bytes`.
fn block_hash(parent: &BlockHash, content: u64) -> BlockHash {
    let mut h = Blake2b::<U8>::new();
    h.update(parent);
    h.update(content.to_be_bytes());
    h.finalize().into()
}

/// Appends the chain of `n` fresh blocks after `parent` to `out`, drawing
/// content ids from `next_content`.
fn chain(parent: BlockHash, n: u64, next_content: &mut u64, out: &mut Vec<BlockHash>) {
    let mut parent = parent;
    for _ in 0..n {
        parent = block_hash(&parent, *next_content);
        *next_content += 1;
        out.push(parent);
    }
}

/// One conversation's state.
struct Conversation {
    /// Keys of the system prompt and the whole history so far.
    prefix: Vec<BlockHash>,
    /// Per turn: (user blocks, reply blocks).
    turns: Vec<(u64, u64)>,
    /// The next turn to play.
    next: usize,
}

/// Writes the workload for `preset` and `seed` to `out`.
fn generate(preset: &Preset, seed: &Seed, out: &mut dyn Write) -> io::Result<()> {
    let mut rng = PyRandom::from_words(&seed.words());
    let root: BlockHash = [0; 8];
    let mut content: u64 = 0;

    let mut prompts: Vec<Vec<BlockHash>> = Vec::with_capacity(preset.prompts);
    for _ in 0..preset.prompts {
        let n = rng.randint(preset.prompt_blocks.0, preset.prompt_blocks.1);
        let mut keys = Vec::with_capacity(n as usize);
        chain(root, n, &mut content, &mut keys);
        prompts.push(keys);
    }

    let mut convs: Vec<Conversation> = Vec::with_capacity(preset.conversations);
    for _ in 0..preset.conversations {
        let n_turns = rng.randint(1, preset.max_turns);
        let turns = (0..n_turns)
            .map(|_| {
                let user = rng.randint(1, 8);
                let reply = rng.randint(1, 8);
                (user, reply)
            })
            .collect();
        let prompt = &prompts[rng.randbelow(prompts.len() as u64) as usize];
        convs.push(Conversation {
            prefix: prompt.clone(),
            turns,
            next: 0,
        });
    }

    writeln!(
        out,
        "# kvtier-workload v1 preset={} seed={}",
        preset.name,
        seed.display()
    )?;
    let mut live: Vec<usize> = (0..convs.len()).collect();
    let mut line: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut req: u64 = 0;
    while !live.is_empty() {
        let i = rng.randbelow(live.len() as u64) as usize;
        let conv_index = live[i];
        let conv = &mut convs[conv_index];
        let (user, reply) = conv.turns[conv.next];
        let parent = *conv.prefix.last().expect("a prompt has at least one block");
        let before = conv.prefix.len();
        chain(parent, user, &mut content, &mut conv.prefix);

        line.clear();
        write!(line, "R r{} {}", req, conv.prefix.len())?;
        for key in &conv.prefix {
            line.push(b' ');
            push_hex(&mut line, key);
            line.extend_from_slice(b"00000000");
        }
        line.push(b'\n');
        out.write_all(&line)?;
        req += 1;

        debug_assert!(conv.prefix.len() > before);
        let last_user = *conv.prefix.last().expect("user blocks were just added");
        chain(last_user, reply, &mut content, &mut conv.prefix);
        conv.next += 1;
        if conv.next == conv.turns.len() {
            live.swap_remove(i);
            // The conversation is over: free its history.
            convs[conv_index].prefix = Vec::new();
        }
    }
    Ok(())
}

/// Appends the lowercase hex of `bytes`.
fn push_hex(line: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        line.push(HEX[usize::from(b >> 4)]);
        line.push(HEX[usize::from(b & 15)]);
    }
}

const USAGE: &str =
    "usage: kvtier-workload [--preset {large,medium,small}] [--seed SEED] [--out OUT]";

/// Parsed command line.
struct Args {
    preset: &'static Preset,
    seed: Seed,
    out: String,
}

fn parse_args() -> Result<Args, String> {
    let mut preset = &PRESETS[1];
    let mut seed = Seed::parse("7").expect("valid default");
    let mut out = "-".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        if flag == "-h" || flag == "--help" {
            println!("{USAGE}");
            println!("Deterministic multi-turn chat workload for KV-tiering benchmarks.");
            std::process::exit(0);
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("argument {flag}: expected one argument"))
        };
        match flag.as_str() {
            "--preset" => {
                let v = value()?;
                preset = PRESETS.iter().find(|p| p.name == v).ok_or_else(|| {
                    format!(
                        "argument --preset: invalid choice: '{v}' (choose from 'large', 'medium', 'small')"
                    )
                })?;
            }
            "--seed" => {
                let v = value()?;
                seed = Seed::parse(&v)
                    .ok_or_else(|| format!("argument --seed: invalid int value: '{v}'"))?;
            }
            "--out" => out = value()?,
            _ => return Err(format!("unrecognized arguments: {arg}")),
        }
    }
    Ok(Args { preset, seed, out })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{USAGE}\nkvtier-workload: error: {msg}");
            return ExitCode::from(2);
        }
    };
    let result = if args.out == "-" {
        let stdout = io::stdout();
        let mut w = BufWriter::with_capacity(1 << 20, stdout.lock());
        generate(args.preset, &args.seed, &mut w).and_then(|()| w.flush())
    } else {
        std::fs::File::create(&args.out).and_then(|f| {
            let mut w = BufWriter::with_capacity(1 << 20, f);
            generate(args.preset, &args.seed, &mut w).and_then(|()| w.flush())
        })
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvtier-workload: {}: {e}", args.out);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mt19937_matches_python_for_seed_7() {
        // python3 -c "import random; r=random.Random(7); print([r.getrandbits(32) for _ in range(3)])"
        let mut r = PyRandom::from_words(&Seed::parse("7").unwrap().words());
        let got: Vec<u64> = (0..3).map(|_| r.getrandbits(32)).collect();
        assert_eq!(got, PY_SEED7_FIRST3);
    }

    #[test]
    fn blake2b_64_matches_python() {
        // hashlib.blake2b(bytes(16), digest_size=8).hexdigest()
        let h = block_hash(&[0; 8], 0);
        let mut hex = Vec::new();
        push_hex(&mut hex, &h);
        assert_eq!(hex, b"5250a507f994740e");
    }

    #[test]
    fn seed_words_and_display() {
        let s = Seed::parse(" -0004294967297 ").unwrap();
        assert_eq!(s.display(), "-4294967297");
        assert_eq!(s.words(), vec![1, 1]);
        assert_eq!(Seed::parse("1_000").unwrap().display(), "1000");
        assert_eq!(Seed::parse("-0").unwrap().display(), "0");
        assert!(Seed::parse("1__0").is_none());
        assert!(Seed::parse("x").is_none());
        assert!(Seed::parse("").is_none());
    }

    const PY_SEED7_FIRST3: [u64; 3] = [1_390_851_128, 4_071_050_724, 647_892_279];
}
