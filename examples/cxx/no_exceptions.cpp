// no_exceptions.cpp: kvtier.hpp in an engine built with -fno-exceptions.
// Only the try_* API exists there; every error is a kvtier::result.
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#error "build this file with -fno-exceptions"
#endif

#include <cstdio>
#include <string>
#include <vector>

#include "kvtier.hpp"

namespace {

// A tier in an exception-free engine reports failures as statuses.
class refusing_tier : public kvtier::tier {
 public:
  std::string name() const override { return "refuser"; }
  kvtier::tier_lookup lookup(kvtier::key_view, kvtier::request_view) override { return kvtier::tier_lookup::miss; }
  kvtier_status submit_store(kvtier::job_view) override { return KVTIER_STATUS_NO_SPACE; }
  kvtier_status submit_load(kvtier::job_view) override { return KVTIER_STATUS_NOT_FOUND; }
};

int fail(const char *what, const kvtier::error_info &e) {
  std::fprintf(stderr, "no_exceptions: %s: %s: %s\n", what, kvtier_status_str(e.status), e.message.c_str());
  return 1;
}

}  // namespace

int main() {
  kvtier::result<kvtier::manager> bad = kvtier::manager::try_from_json(R"({"primary": {"capacity": -1}})");
  if (bad || bad.status() != KVTIER_STATUS_INVALID_ARGUMENT ||
      bad.error().message.find("primary.capacity") == std::string::npos) {
    std::fprintf(stderr, "no_exceptions: a bad document should fail naming primary.capacity\n");
    return 1;
  }
  auto made = kvtier::manager::try_from_json(R"({"block_bytes": 64, "primary": {"capacity": 4}})");
  if (!made) return fail("from_json", made.error());
  kvtier::manager m = std::move(made).value();
  auto idx = m.try_add_tier(std::make_unique<refusing_tier>());
  if (!idx) return fail("add_tier", idx.error());

  // The request report callback, installed through try_: r1's report
  // arrives once it finishes (below, after its duplicate is refused).
  uint64_t reported_stored = 0;
  if (auto r = m.try_set_request_report_callback(
          [&reported_stored](const kvtier::request_report_view &rep) { reported_stored += rep.stored; });
      !r)
    return fail("set_request_report_callback", r.error());

  std::vector<std::string> keys{"block-a", "block-b"};
  auto r1 = m.try_request_begin("r1");
  if (!r1) return fail("request_begin", r1.error());
  kvtier_request_handle h = r1->handle;
  auto plan = m.try_prepare_store(h, keys);
  if (!plan) return fail("prepare_store", plan.error());
  if (plan->refused || plan->slots.size() != 2) return 1;
  if (auto r = m.try_complete_store(h, keys, true); !r || r->ready != 2) return fail("complete_store", r.error());
  // The tier refused the cascade: a failed status, logged, nothing thrown;
  // the job counts as failed once the next step collects it.
  for (int step = 0; step < 2; ++step)
    if (auto r = m.try_schedule_end(); !r) return fail("schedule_end", r.error());
  auto err = m.try_take_error();
  if (!err) return fail("take_error", err.error());
  auto again = m.try_request_begin("r1");
  if (again || again.status() != KVTIER_STATUS_DUPLICATE_REQUEST) {
    std::fprintf(stderr, "no_exceptions: a duplicate request should fail\n");
    return 1;
  }
  if (auto r = m.try_request_finished(h); !r) return fail("request_finished", r.error());
  if (reported_stored != 2) {
    std::fprintf(stderr, "no_exceptions: the report of r1 should count 2 blocks stored, got %llu\n",
                 static_cast<unsigned long long>(reported_stored));
    return 1;
  }
  auto text = m.try_metrics_prometheus();
  if (!text || text->find("kvtier_tier_job_failures_total{tier=\"refuser\",medium=\"any\",direction=\"store\"} 1") == std::string::npos) {
    std::fprintf(stderr, "no_exceptions: metrics should count the refused cascade:\n%s\n",
                 text ? text->c_str() : "(none)");
    return 1;
  }
  // Where the /metrics endpoint listens: none here; port 0 of another
  // manager is the port picked.  Readiness: the empty text when ready.
  if (auto a = m.try_metrics_address(); a || a.status() != KVTIER_STATUS_NOT_FOUND) {
    std::fprintf(stderr, "no_exceptions: a manager without an endpoint has no metrics address\n");
    return 1;
  }
  if (auto ready = m.try_readiness(); !ready || !ready->empty()) {
    std::fprintf(stderr, "no_exceptions: the manager should be ready\n");
    return 1;
  }
  auto served = kvtier::manager::try_from_json(R"({"primary": {"capacity": 4}, "metrics": {"listen": "127.0.0.1:0"}})");
  if (!served) return fail("from_json with metrics", served.error());
  auto address = served->try_metrics_address();
  if (!address) return fail("metrics_address", address.error());
  if (address->rfind("127.0.0.1:", 0) != 0 || *address == "127.0.0.1:0") {
    std::fprintf(stderr, "no_exceptions: the metrics address should name the port picked: %s\n", address->c_str());
    return 1;
  }
  std::printf("no_exceptions: ok (%s)\n", err->value_or("no error logged").c_str());
  return 0;
}
