// request_reports.cpp: per-request reports through kvtier.hpp.  A manager
// built from JSON over the engine's own region, with an fs tier; the
// report callback (manager::set_request_report_callback) receives what
// each finished request asked for, loaded, stored and was served from
// which tier.  Checks every number, that a callback which throws never
// unwinds into kvtier, and that an empty function removes the callback.
// Exits 0 when all holds.

#include <cstdio>
#include <cstdlib>
#include <system_error>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "kvtier.hpp"

namespace {

int failures = 0;

void expect(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "request_reports: FAILED: %s\n", what);
    ++failures;
  }
}

// A report copied out of the callback (the view is borrowed for the call).
struct copied {
  kvtier_request_handle request = 0;
  std::string name;
  uint64_t asked = 0, loaded = 0, stored = 0, recomputed = 0;
  std::vector<uint64_t> tier_hits, tier_served;
};

copied copy(const kvtier::request_report_view &r) {
  copied c;
  c.request = r.request;
  c.name = std::string(r.name);
  c.asked = r.asked;
  c.loaded = r.loaded;
  c.stored = r.stored;
  c.recomputed = r.recomputed;
  c.tier_hits.assign(r.tier_hits.begin(), r.tier_hits.end());
  c.tier_served.assign(r.tier_served.begin(), r.tier_served.end());
  return c;
}

}  // namespace

int main() {
  char dir[] = "/tmp/kvtier-request-reports-XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("mkdtemp");
    return 1;
  }
  std::string region_name = "kvtier-request-reports-" + std::to_string(getpid());
  std::vector<copied> reports;
  {
    kvtier_region_options ro = kvtier::region::default_options();
    ro.name = region_name.c_str();
    ro.slot_count = 8;
    ro.slot_bytes = 4096;
    kvtier::region slots = kvtier::region::create(ro);

    std::string json = R"({"primary": {"capacity": 8},
      "tiers": [{"type": "fs", "options": {"directory": ")" + std::string(dir) +
                       R"(", "read_threads": 1, "write_threads": 1}}]})";
    kvtier::manager m = kvtier::manager::from_json(json, slots);
    m.set_request_report_callback([&reports](const kvtier::request_report_view &r) { reports.push_back(copy(r)); });

    // Request 1 stores two blocks and finishes: its report comes at once.
    std::vector<std::string> keys{"block-0", "block-1"};
    kvtier_request_handle r1 = m.request_begin("req-1").handle;
    kvtier::store_plan plan = m.prepare_store(r1, keys);
    for (uint32_t slot : plan.slots) std::memset(slots.slot_address(slot), 'k', 4096);
    m.complete_store(r1, keys, true);
    m.request_finished(r1);
    m.schedule_end();
    expect(reports.size() == 1, "one report after the first request finished");
    if (!reports.empty()) {
      expect(reports[0].request == r1 && reports[0].name == "req-1", "the report names its request");
      expect(reports[0].stored == 2 && reports[0].loaded == 0, "request 1 stored 2 blocks and loaded none");
      expect(reports[0].tier_hits.size() == 2, "tier_hits has the primary tier and the fs tier");
    }

    // Request 2 asks for both and one more, loads the two ready ones.
    std::vector<std::string> asked{"block-0", "block-1", "block-2"};
    kvtier_request_handle r2 = m.request_begin("req-2").handle;
    kvtier::lookup_answer a = m.lookup(r2, asked);
    while (!a.settled()) {
      m.schedule_end();
      a = m.lookup(r2, asked);
    }
    expect(a.hits == 2, "both stored blocks are hits");
    std::vector<std::string> ready(asked.begin(), asked.begin() + a.hits);
    m.prepare_load(r2, ready);
    m.complete_load(r2, ready);
    m.request_finished(r2);
    expect(reports.size() == 2, "a second report after the second request finished");
    if (reports.size() == 2) {
      const copied &r = reports[1];
      expect(r.name == "req-2" && r.asked == 3 && r.loaded == 2 && r.recomputed == 1,
             "request 2 asked 3, loaded 2, computed 1");
      expect(r.tier_served.size() == 2 && r.tier_served[0] == 2 && r.tier_served[1] == 0,
             "request 2 was served 2 blocks by the primary tier, none by the fs tier");
    }

    // A callback that throws: swallowed in the wrapper, the manager goes on.
    int thrown = 0;
    m.set_request_report_callback([&thrown](const kvtier::request_report_view &) {
      ++thrown;
      throw std::runtime_error("a bug in the engine's report sink");
    });
    kvtier_request_handle r3 = m.request_begin("req-3").handle;
    m.request_finished(r3);
    expect(thrown == 1, "the throwing callback ran once");
    kvtier_request_handle r4 = m.request_begin("req-4").handle;
    expect(m.lookup(r4, keys).hits == 2, "the manager answers after the callback threw");
    m.request_finished(r4);
    expect(thrown == 2, "the throwing callback stays installed");

    // An empty function removes the callback.
    m.set_request_report_callback({});
    kvtier_request_handle r5 = m.request_begin("req-5").handle;
    m.request_finished(r5);
    expect(thrown == 2 && reports.size() == 2, "no callback runs once it is removed");

    // try_ style: no callback, no exception.
    kvtier::result<void> removed = m.try_set_request_report_callback({});
    expect(static_cast<bool>(removed), "removing twice is fine");
    m.shutdown();
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (failures) return 1;
  std::printf("request_reports: %zu reports, every number as expected\n", reports.size());
  return 0;
}
