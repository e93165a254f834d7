// engine_loop.cpp: the engine loop of a C++ engine over kvtier.hpp.
//
// A manager built from JSON (a small primary tier in private memory) with
// a secondary tier written in C++: an in-memory store whose worker thread
// copies blocks and reports them with tier::report().  Pass 1 serves
// requests that overflow the primary tier, so blocks cascade to the C++
// tier and get evicted; pass 2 replays them, and every evicted block comes
// back (promoted from the C++ tier) with its bytes intact.  While blocks
// are on their way the loop sleeps in poll() on the manager's wake-up
// descriptor instead of spinning.  A second C++ tier throws from lookup:
// the exception becomes a failed status in kvtier's error log, never a
// crash.  Events arrive through a callback; metrics come out as
// Prometheus text.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kvtier.hpp"
#include "example_util.h"

namespace {

constexpr std::size_t kBlockBytes = 4096;
constexpr int kRequests = 6;
constexpr int kBlocks = 4;  // per request; block 0 is a shared prefix

std::string key_of(int request, int block) {
  char buf[16] = {0};
  std::snprintf(buf, sizeof buf, "r%02d-b%02d", block == 0 ? 0 : request, block);
  return std::string(buf, sizeof buf);
}

uint8_t pattern(const std::string &key, std::size_t i) {
  uint32_t h = 2166136261u;
  for (unsigned char c : key) h = (h ^ c) * 16777619u;
  return static_cast<uint8_t>(h + i * 7u);
}

// A secondary tier in C++: blocks in a map, copied by a worker thread.
class memory_tier : public kvtier::tier {
 public:
  explicit memory_tier(kvtier::slot_memory slots) : slots_(slots), worker_([this] { run(); }) {}
  ~memory_tier() override { stop(); }

  std::string name() const override { return "cxx-mem"; }
  kvtier::medium medium() const override { return kvtier::medium::cpu; }
  kvtier::locality locality() const override { return kvtier::locality::local; }

  kvtier::tier_lookup lookup(kvtier::key_view key, kvtier::request_view) override {
    std::lock_guard<std::mutex> g(mu_);
    return blocks_.count(std::string(key.bytes())) ? kvtier::tier_lookup::hit : kvtier::tier_lookup::miss;
  }
  kvtier_status submit_store(kvtier::job_view job) override { return enqueue(job); }
  kvtier_status submit_load(kvtier::job_view job) override { return enqueue(job); }
  bool has_pending_work() override {
    std::lock_guard<std::mutex> g(mu_);
    return !queue_.empty() || busy_;
  }
  kvtier_status drain() override {
    std::unique_lock<std::mutex> g(mu_);
    idle_.wait(g, [this] { return queue_.empty() && !busy_; });
    return KVTIER_STATUS_OK;
  }
  kvtier_status shutdown() override {
    stop();
    return KVTIER_STATUS_OK;
  }
  void stats(std::vector<kvtier::tier_stat> &out) override {
    std::lock_guard<std::mutex> g(mu_);
    out.push_back({"blocks", false, static_cast<double>(blocks_.size())});
    out.push_back({"copies", true, static_cast<double>(copies_)});
  }

 private:
  struct work {
    uint64_t id;
    bool store;
    std::vector<std::string> keys;
    std::vector<uint32_t> slots;
  };

  kvtier_status enqueue(kvtier::job_view job) {
    work w{job.id(), job.is_store(), {}, {}};
    for (std::size_t i = 0; i < job.size(); ++i) {
      w.keys.emplace_back(job.key(i).bytes());
      w.slots.push_back(job.slot(i));
    }
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_) return KVTIER_STATUS_CLOSED;
    queue_.push_back(std::move(w));
    cv_.notify_one();
    return KVTIER_STATUS_OK;
  }

  void run() {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      cv_.wait(g, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work w = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      bool ok = true;
      for (std::size_t i = 0; i < w.keys.size(); ++i) {
        auto *slot = static_cast<uint8_t *>(slots_.slot(w.slots[i]));
        if (w.store) {
          auto [it, fresh] = blocks_.try_emplace(w.keys[i]);
          it->second.assign(slot, slot + kBlockBytes);
          if (fresh) announce(kvtier::event_kind::stored, w.keys[i]);  // for KV-aware routers
        } else {
          auto it = blocks_.find(w.keys[i]);
          if (it == blocks_.end()) {
            ok = false;
            continue;
          }
          std::memcpy(slot, it->second.data(), kBlockBytes);
        }
        ++copies_;
      }
      g.unlock();
      // Reported from the worker: thread-safe, and it wakes the engine.
      report(w.id, ok, ok ? w.keys.size() * kBlockBytes : 0);
      g.lock();
      busy_ = false;
      idle_.notify_all();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
  }

  kvtier::slot_memory slots_;
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<work> queue_;
  std::map<std::string, std::vector<uint8_t>> blocks_;
  bool busy_ = false;
  bool stopping_ = false;
  uint64_t copies_ = 0;
  std::thread worker_;  // last: starts after every member above exists
};

// A tier whose lookup throws: kvtier must see a failed status, not an exception.
class throwing_tier : public kvtier::tier {
 public:
  std::string name() const override { return "thrower"; }
  kvtier::tier_lookup lookup(kvtier::key_view, kvtier::request_view) override {
    throw std::runtime_error("lookup exploded");
  }
  kvtier_status submit_store(kvtier::job_view job) override {
    return report(job.id(), true);  // accepts and forgets
  }
  kvtier_status submit_load(kvtier::job_view) override { return KVTIER_STATUS_TIER; }
};

struct counts {
  int hits = 0;
  int promoted = 0;
  int stored = 0;
  int bad_bytes = 0;
  int wakes = 0;
};

// Sleeps until a job finishes (or 5 s pass): no spinning on has_pending_work.
void wait_for_jobs(kvtier::manager &m, counts &c) {
  if (!m.has_pending_work()) return;
  pollfd p{m.wake_fd(), POLLIN, 0};
  if (poll(&p, 1, 5000) == 1) {
    uint64_t v = 0;
    if (read(p.fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v)) ++c.wakes;
  }
}

void serve(kvtier::manager &m, const kvtier::slot_memory &slots, int r, counts &c) {
  std::string req = "req-" + std::to_string(r);
  std::vector<std::string> keys;
  for (int b = 0; b < kBlocks; ++b) keys.push_back(key_of(r, b));
  kvtier_request_handle h = m.request_begin(req).handle;

  // One lookup of the request's keys: `hits` leading keys are ready, and
  // it started the promotions of every later block of the prefix the C++
  // tier has (`pending` on their way).  Ask again next step while any is
  // pending; then load the hits and compute the rest.
  kvtier::lookup_answer a = m.lookup(h, keys);
  for (int step = 0; !a.settled(); ++step) {
    if (step > 1000) throw std::runtime_error(req + ": promotions never finished");
    m.schedule_end();  // submits the promotions this step started
    wait_for_jobs(m, c);
    a = m.lookup(h, keys);
  }
  std::size_t hits = a.hits;
  if (hits > 0) {
    std::vector<std::string> ready(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(hits));
    std::vector<uint32_t> got = m.prepare_load(h, ready);
    for (std::size_t b = 0; b < hits; ++b) {
      const auto *slot = static_cast<const uint8_t *>(slots.slot(got[b]));
      for (std::size_t i = 0; i < kBlockBytes; ++i)
        if (slot[i] != pattern(keys[b], i)) {
          ++c.bad_bytes;
          break;
        }
    }
    m.complete_load(h, ready);
    c.hits += static_cast<int>(hits);
  }

  std::vector<std::string> rest(keys.begin() + static_cast<std::ptrdiff_t>(hits), keys.end());
  if (!rest.empty()) {
    kvtier::store_plan plan = m.prepare_store(h, rest);
    for (int tries = 0; plan.refused && tries < 100; ++tries) {
      m.schedule_end();
      wait_for_jobs(m, c);
      plan = m.prepare_store(h, rest);
    }
    if (plan.refused) throw std::runtime_error(req + ": no room in the primary tier");
    std::vector<std::string> written;
    for (std::size_t j = 0; j < plan.positions.size(); ++j) {
      const std::string &k = rest[plan.positions[j]];
      auto *slot = static_cast<uint8_t *>(slots.slot(plan.slots[j]));
      for (std::size_t i = 0; i < kBlockBytes; ++i) slot[i] = pattern(k, i);  // the "GPU" writes
      written.push_back(k);
    }
    kvtier_store_completion done = m.complete_store(h, written, true);
    if (done.ready != written.size()) throw std::runtime_error(req + ": a planned block did not become ready");
    c.stored += static_cast<int>(written.size());
  }
  m.request_finished(h);
  m.schedule_end();
}

// The owners: a region and a manager made from C options over the
// region's slots, the built-in fs tier over them, ownership moved between
// owners.
bool owners_work() {
  kvtier_region_options ro = kvtier::region::default_options();
  std::string name = "kvtier-engine-loop-" + std::to_string(getpid());
  ro.name = name.c_str();
  ro.slot_count = 4;
  ro.slot_bytes = kBlockBytes;
  ro.prefault = KVTIER_REGION_PREFAULT_OFF;
  kvtier::region r = kvtier::region::create(ro);
  kvtier::region moved = std::move(r);
  if (r || !moved || moved.slot_count() != 4 || moved.slot_address(3) == nullptr) return false;

  kvtier_manager_options mo = kvtier::manager::default_options();
  mo.capacity = 4;
  kvtier::result<kvtier::manager> none = kvtier::manager::try_create(mo, kvtier::region());  // no region
  if (none || none.status() != KVTIER_STATUS_NULL_ARGUMENT) return false;
  kvtier::manager m = kvtier::manager::create(mo, moved);
  char dir[64];
  if (!example_temp_dir(dir, sizeof dir, "engine-loop")) return false;
  kvtier_fs_options fo = kvtier_fs_options_default();
  fo.directory = dir;
  fo.read_threads = 1;
  fo.write_threads = 1;
  fo.direct_io = false;
  bool ok = m.add_fs_tier(fo) == 1;
  // A manager without slot memory has no room for a built-in tier.
  kvtier::manager bare = kvtier::manager::create(mo);
  kvtier::result<std::size_t> refused = bare.try_add_fs_tier(fo);
  ok = ok && !refused && refused.status() == KVTIER_STATUS_INVALID_ARGUMENT;
  moved.reset();  // the manager keeps the region's slots mapped
  ok = ok && m.slots().slot_count == 4;
  m.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return ok && !ec;
}

int run() {
  if (!owners_work()) {
    std::fprintf(stderr, "engine_loop: the region/manager owners failed\n");
    return 1;
  }
  kvtier::manager m = kvtier::manager::from_json(R"({
    "block_bytes": 4096,
    "primary": {"capacity": 8, "policy": "lru", "event_capacity": 1024}
  })");
  kvtier::slot_memory slots = m.slots();

  std::map<std::pair<uint32_t, kvtier::event_kind>, int> events;  // (tier, kind) -> keys
  m.set_event_callback([&events](const kvtier::event_view &b) {
    events[{b.tier, b.kind}] += static_cast<int>(b.keys.size());
  });

  std::size_t mem = m.add_tier(std::make_unique<memory_tier>(slots));
  std::size_t thrower = m.add_tier(std::make_unique<throwing_tier>());

  // The non-throwing API: errors are values.
  const kvtier_request_handle never_started = 12345;
  const std::string probe = key_of(0, 0);
  kvtier::result<kvtier::lookup_answer> nope = m.try_lookup(never_started, kvtier::key_view(probe));
  if (nope || nope.status() != KVTIER_STATUS_UNKNOWN_REQUEST) {
    std::fprintf(stderr, "engine_loop: an unknown request should fail\n");
    return 1;
  }
  // The throwing API: the same error as kvtier::error.
  try {
    (void)m.lookup(never_started, kvtier::key_view(probe));
    std::fprintf(stderr, "engine_loop: expected kvtier::error\n");
    return 1;
  } catch (const kvtier::error &e) {
    if (e.status() != KVTIER_STATUS_UNKNOWN_REQUEST) return 1;
  }

  // kvtier's log records (the thrower's failures among them) to the engine's log.
  std::atomic<int> warnings{0};
  kvtier::set_log_callback(
      [&warnings](kvtier_log_level level, std::string_view target, std::string_view) {
        if (level <= KVTIER_LOG_LEVEL_WARN && target.substr(0, 6) == "kvtier") ++warnings;
      },
      KVTIER_LOG_LEVEL_WARN);

  counts pass1, pass2;
  for (int r = 0; r < kRequests; ++r) serve(m, slots, r, pass1);
  while (m.has_pending_work()) {
    m.schedule_end();
    wait_for_jobs(m, pass1);
  }
  for (int r = 0; r < kRequests; ++r) serve(m, slots, r, pass2);

  int tier_errors = 0;
  while (auto msg = m.take_error()) {
    if (msg->find("thrower") != std::string::npos) ++tier_errors;
  }
  std::string metrics = m.metrics_prometheus();
  std::printf("pass 1: %d hits, %d stored, %d wake-ups\n", pass1.hits, pass1.stored, pass1.wakes);
  std::printf("pass 2: %d hits, %d stored, %d wake-ups, %d bad blocks\n", pass2.hits, pass2.stored,
              pass2.wakes, pass2.bad_bytes);
  std::printf("events: primary stored %d removed %d; %s stored %d\n", events[{0u, kvtier::event_kind::stored}],
              events[{0u, kvtier::event_kind::removed}], "cxx-mem", events[{static_cast<uint32_t>(mem), kvtier::event_kind::stored}]);
  std::printf("thrower (tier %zu) errors logged: %d; log callback warnings: %d\n", thrower, tier_errors,
              warnings.load());

  bool ok = true;
  auto expect = [&ok](bool cond, const char *what) {
    if (!cond) {
      std::fprintf(stderr, "engine_loop: FAILED: %s\n", what);
      ok = false;
    }
  };
  expect(pass1.stored == 1 + kRequests * (kBlocks - 1), "pass 1 stores every distinct block once");
  expect(pass2.hits == kRequests * kBlocks, "pass 2 finds every block");
  expect(pass2.stored == 0, "pass 2 stores nothing");
  expect(pass2.bad_bytes == 0 && pass1.bad_bytes == 0, "every loaded block has its bytes");
  expect(pass2.wakes > 0, "the engine slept in poll() and was woken");
  expect(tier_errors > 0, "the throwing tier's failures are logged");
  expect(events[{0u, kvtier::event_kind::removed}] > 0, "evictions arrive as events");
  expect(warnings.load() >= tier_errors, "every logged tier failure reached the log callback");
  expect(events[{static_cast<uint32_t>(mem), kvtier::event_kind::stored}] == pass1.stored,
         "the C++ tier announces each block it stores once");
  expect(metrics.find("kvtier_tier_jobs_total{tier=\"cxx-mem\",medium=\"cpu\",direction=\"store\"}") != std::string::npos,
         "metrics name the C++ tier");
  expect(metrics.find("kvtier_custom_copies_total{tier=\"cxx-mem\",medium=\"cpu\"}") != std::string::npos,
         "the C++ tier's own stats reach the metrics");
  expect(m.readiness().empty(), "the manager and its tiers are ready");

  // A pin set keeps the last request's last two blocks resident; a drop of
  // every block keeps them (held) and skips the C++ tiers (they cannot drop).
  std::vector<std::string> prompt{key_of(kRequests - 1, kBlocks - 2), key_of(kRequests - 1, kBlocks - 1)};
  kvtier_pin_outcome pinned = m.pin_set("prompt", prompt);
  expect(pinned.pinned + pinned.absent == prompt.size(), "a pin set accounts for every key");
  expect(pinned.pinned > 0, "the last request's blocks are resident and held");
  auto sets = m.pin_sets();
  expect(sets.size() == 1 && sets[0].keys == pinned.pinned && std::string(sets[0].name) == "prompt",
         "the pin set is listed with its keys");
  kvtier_drop_report dropped = m.drop_blocks("");
  expect(dropped.kept >= pinned.pinned, "a drop keeps the held blocks");
  expect(dropped.unsupported_tiers == 2, "the two C++ tiers cannot drop and are counted");
  expect(m.unpin_set("prompt") == pinned.pinned, "unpinning releases what the set held");
  expect(m.pin_sets().empty(), "no pin set is left");
  kvtier_drop_report again = m.drop_blocks("");
  expect(again.dropped >= pinned.pinned && again.kept == 0, "once unpinned, the blocks drop");
  m.shutdown();
  expect(m.readiness() == "manager: shut down\n", "a shut-down manager is not ready");
  kvtier::set_log_callback(nullptr);  // before `warnings` goes out of scope
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const kvtier::error &e) {
    std::fprintf(stderr, "engine_loop: %s\n", e.what());
  } catch (const std::exception &e) {
    std::fprintf(stderr, "engine_loop: %s\n", e.what());
  }
  return 1;
}
