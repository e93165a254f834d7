/*
 * kvtier.hpp: a header-only C++17 layer over kvtier.h.
 *
 * - Move-only owners for every handle: kvtier::region, kvtier::primary,
 *   kvtier::manager (each frees its handle; get() lends the C handle).
 * - Keys as kvtier::key_view (from a pointer and length, a string_view, or
 *   any contiguous container of bytes) and key lists as kvtier::key_list
 *   (from any range of such keys, or a kvtier_key array): no std::span.
 * - Two error styles.  try_* functions never throw: they return a
 *   kvtier::result<T> (an expected-like value-or-error_info).  Without the
 *   try_ prefix, functions throw kvtier::error (status and message); they
 *   exist only when exceptions are on (__cpp_exceptions), so the header
 *   builds with -fno-exceptions.
 * - Secondary tiers in C++: derive from kvtier::tier and register with
 *   manager::add_tier.  Every callback the C side sees is noexcept; an
 *   exception thrown by your tier becomes a failed status (counted, and the
 *   failing callback named in the manager's error log) and never crosses
 *   into kvtier.
 */
#ifndef KVTIER_HPP
#define KVTIER_HPP

#if !defined(__cplusplus) || (__cplusplus < 201703L && (!defined(_MSVC_LANG) || _MSVC_LANG < 201703L))
#error "kvtier.hpp needs C++17 or later (use kvtier.h, the C API, from older C++ or C)"
#endif

#include "kvtier.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#define KVTIER_HPP_EXCEPTIONS 1
#include <exception>
#include <stdexcept>
#else
#define KVTIER_HPP_EXCEPTIONS 0
#include <cstdlib>
#endif

namespace kvtier {

/// A failed call: the status and kvtier's message for it.
struct error_info {
  kvtier_status status = KVTIER_STATUS_OK;
  std::string message;
};

/// The error of the last failed kvtier call on this thread, as `status`.
inline error_info last_error(kvtier_status status) {
  const char *m = kvtier_last_error_message();
  return error_info{status, m ? std::string(m) : std::string()};
}

#if KVTIER_HPP_EXCEPTIONS
/// Exception thrown by the throwing API: a status and a message.
class error : public std::runtime_error {
 public:
  explicit error(error_info info)
      : std::runtime_error(std::string(kvtier_status_str(info.status)) + ": " + info.message),
        status_(info.status) {}
  error(kvtier_status status, const std::string &message) : error(error_info{status, message}) {}
  /// The kvtier status.
  kvtier_status status() const noexcept { return status_; }

 private:
  kvtier_status status_;
};

[[noreturn]] inline void raise(error_info info) { throw error(std::move(info)); }
#endif

namespace detail {
[[noreturn]] inline void bad_access(const error_info &e) {
#if KVTIER_HPP_EXCEPTIONS
  raise(e);
#else
  (void)e;
  std::abort();
#endif
}
}  // namespace detail

/// Value or error, for code built without exceptions (or that prefers it).
/// `value()` on an error throws kvtier::error (aborts without exceptions).
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : value_(std::move(value)) {}
  result(error_info e) : error_(std::move(e)) {}

  bool has_value() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return has_value(); }
  /// KVTIER_STATUS_OK or the failure's status.
  kvtier_status status() const noexcept { return value_ ? KVTIER_STATUS_OK : error_.status; }
  /// The failure (empty message and OK status on success).
  const error_info &error() const noexcept { return error_; }

  T &value() & {
    if (!value_) detail::bad_access(error_);
    return *value_;
  }
  const T &value() const & {
    if (!value_) detail::bad_access(error_);
    return *value_;
  }
  T &&value() && {
    if (!value_) detail::bad_access(error_);
    return std::move(*value_);
  }
  T &operator*() & { return value(); }
  T &&operator*() && { return std::move(*this).value(); }
  T *operator->() { return &value(); }
  const T *operator->() const { return &value(); }
  template <class U>
  T value_or(U &&fallback) const & {
    return value_ ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::optional<T> value_;
  error_info error_;
};

/// Success or error.
template <>
class [[nodiscard]] result<void> {
 public:
  result() = default;
  result(error_info e) : ok_(false), error_(std::move(e)) {}
  bool has_value() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  kvtier_status status() const noexcept { return ok_ ? KVTIER_STATUS_OK : error_.status; }
  const error_info &error() const noexcept { return error_; }
  void value() const {
    if (!ok_) detail::bad_access(error_);
  }

 private:
  bool ok_ = true;
  error_info error_;
};

namespace detail {
inline result<void> check(kvtier_status s) {
  if (s == KVTIER_STATUS_OK) return {};
  return last_error(s);
}
template <class T>
result<T> check(kvtier_status s, T &&value) {
  if (s == KVTIER_STATUS_OK) return result<T>(std::forward<T>(value));
  return result<T>(last_error(s));
}
#if KVTIER_HPP_EXCEPTIONS
template <class T>
T unwrap(result<T> r) {
  if (!r) raise(r.error());
  return std::move(r).value();
}
inline void unwrap(result<void> r) {
  if (!r) raise(r.error());
}
#endif

template <class C, class = void>
struct is_byte_container : std::false_type {};
template <class C>
struct is_byte_container<
    C, std::void_t<decltype(std::data(std::declval<const C &>())),
                   decltype(std::size(std::declval<const C &>()))>>
    : std::bool_constant<sizeof(*std::data(std::declval<const C &>())) == 1 &&
                         std::is_trivially_copyable_v<
                             std::remove_reference_t<decltype(*std::data(std::declval<const C &>()))>>> {};
}  // namespace detail

/// One key: 1..=KVTIER_MAX_KEY_LEN borrowed bytes (checked by kvtier).
class key_view {
 public:
  key_view() noexcept : k_{nullptr, 0} {}
  key_view(const void *data, std::size_t len) noexcept
      : k_{static_cast<const uint8_t *>(data), len} {}
  key_view(const kvtier_key &k) noexcept : k_(k) {}
  key_view(std::string_view s) noexcept : key_view(s.data(), s.size()) {}
  key_view(const char *s) noexcept : key_view(std::string_view(s)) {}
  /// Any contiguous container of bytes (std::string, std::vector<uint8_t>,
  /// std::array<std::byte, N>, ...).
  template <class C, std::enable_if_t<detail::is_byte_container<C>::value, int> = 0>
  key_view(const C &c) noexcept : key_view(std::data(c), std::size(c)) {}

  const kvtier_key &c() const noexcept { return k_; }
  const uint8_t *data() const noexcept { return k_.data; }
  std::size_t size() const noexcept { return k_.len; }
  std::string_view bytes() const noexcept {
    return std::string_view(reinterpret_cast<const char *>(k_.data), k_.len);
  }
  friend bool operator==(key_view a, key_view b) noexcept { return a.bytes() == b.bytes(); }
  friend bool operator!=(key_view a, key_view b) noexcept { return !(a == b); }

 private:
  kvtier_key k_;
};

/// A list of keys for one call: borrowed when given as kvtier_key array,
/// otherwise converted once (one allocation per call, none per key beyond it).
class key_list {
 public:
  key_list() noexcept = default;
  key_list(const kvtier_key *keys, std::size_t n) noexcept : data_(keys), size_(n) {}
  key_list(const std::vector<kvtier_key> &keys) noexcept : data_(keys.data()), size_(keys.size()) {}
  key_list(key_view one) : owned_(1, one.c()) { adopt(); }
  key_list(std::initializer_list<key_view> keys) {
    owned_.reserve(keys.size());
    for (const key_view &k : keys) owned_.push_back(k.c());
    adopt();
  }
  /// Any range (begin/end) whose elements convert to key_view.
  template <class R,
            class E = decltype(*std::begin(std::declval<const R &>())),
            std::enable_if_t<std::is_convertible_v<E, key_view> &&
                                 !std::is_same_v<std::decay_t<R>, std::vector<kvtier_key>> &&
                                 !std::is_convertible_v<const R &, key_view>,
                             int> = 0>
  key_list(const R &range) {
    for (auto it = std::begin(range); it != std::end(range); ++it) owned_.push_back(key_view(*it).c());
    adopt();
  }
  key_list(const key_list &o) : data_(o.data_), size_(o.size_), owned_(o.owned_) {
    if (!owned_.empty()) adopt();
  }
  key_list(key_list &&o) noexcept : data_(o.data_), size_(o.size_), owned_(std::move(o.owned_)) {
    if (!owned_.empty()) adopt();
  }
  key_list &operator=(const key_list &) = delete;
  key_list &operator=(key_list &&) = delete;

  const kvtier_key *data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  key_view operator[](std::size_t i) const noexcept { return key_view(data_[i]); }
  const kvtier_key *begin() const noexcept { return data_; }
  const kvtier_key *end() const noexcept { return data_ + size_; }

 private:
  void adopt() noexcept {
    data_ = owned_.data();
    size_ = owned_.size();
  }
  const kvtier_key *data_ = nullptr;
  std::size_t size_ = 0;
  std::vector<kvtier_key> owned_;
};

/// An owned copy of a key (what evictions and events hand back).  A vector,
/// not std::basic_string<uint8_t>: char_traits<unsigned char> is not
/// standard and current libc++ no longer has it.
using key_bytes = std::vector<uint8_t>;

inline key_bytes copy_key(const uint8_t *data, std::size_t len) { return key_bytes(data, data + len); }

/// How a key answered a lookup (lookup_answer::stop: key `hits`).
enum class lookup_result : int32_t {
  miss = KVTIER_LOOKUP_MISS,
  hit = KVTIER_LOOKUP_HIT,
  hit_pending = KVTIER_LOOKUP_HIT_PENDING,
  retry = KVTIER_LOOKUP_RETRY,
};

/// Why a lookup answered miss, or why its prefix ends early.
enum class miss_reason : int32_t {
  none = KVTIER_MISS_NONE,
  /// No tier has the key.
  absent = KVTIER_MISS_ABSENT,
  /// A secondary tier has it, but the primary tier had no room for it now.
  no_room = KVTIER_MISS_NO_ROOM,
  /// The request waited past the manager's wait bound: load what is
  /// ready, compute the rest.
  timed_out = KVTIER_MISS_TIMED_OUT,
};

/// What a lookup answered for a request's keys: `hits` leading keys are
/// ready now, `pending` more are on their way before `end`, where the
/// prefix ends (`reason` says why, when it ends before the last key);
/// `stop` is how key `hits` answered (hit when every key is a hit).
/// Nothing to wait for exactly when `pending` is 0 (settled()): then load
/// `hits` keys and compute the rest; else ask again next step.
struct lookup_answer {
  std::size_t hits = 0;
  lookup_result stop = lookup_result::hit;
  miss_reason reason = miss_reason::none;
  std::size_t pending = 0;
  std::size_t end = 0;
  /// Whether nothing is on its way (`pending` is 0).
  bool settled() const noexcept { return pending == 0; }
};

/// Answers of tier::lookup.
enum class tier_lookup : int32_t {
  miss = KVTIER_LOOKUP_MISS,
  hit = KVTIER_LOOKUP_HIT,
  retry = KVTIER_LOOKUP_RETRY,
};

/// What happened to the keys of a cache event.
enum class event_kind : int32_t {
  /// The keys became readable in the tier.
  stored = KVTIER_EVENT_STORED,
  /// The keys left the tier.
  removed = KVTIER_EVENT_REMOVED,
  /// The tier was emptied (no keys).
  cleared = KVTIER_EVENT_CLEARED,
};

/// Where a tier keeps blocks (any: undeclared).
enum class medium : int32_t {
  any = KVTIER_MEDIUM_ANY,
  cpu = KVTIER_MEDIUM_CPU,
  storage = KVTIER_MEDIUM_STORAGE,
};

/// How far a tier is (any: undeclared).
enum class locality : int32_t {
  any = KVTIER_LOCALITY_ANY,
  local = KVTIER_LOCALITY_LOCAL,
  remote = KVTIER_LOCALITY_REMOTE,
};

/// How the file-system tier lays blocks out (kvtier_fs_options::layout).
enum class fs_layout : int32_t {
  /// A file per block: any file system, shared directories.
  files = KVTIER_FS_LAYOUT_FILES,
  /// Records in preallocated segment files: local storage, one process.
  segments = KVTIER_FS_LAYOUT_SEGMENTS,
};

/// How blocks of a request are offloaded.
enum class offload_policy : int32_t {
  block_level = KVTIER_OFFLOAD_BLOCK_LEVEL,
  request_level = KVTIER_OFFLOAD_REQUEST_LEVEL,
};

/// A request manager::request_begin started: the handle every later call
/// of the request takes, and the offload policy the tiers asked for.
struct started_request {
  kvtier_request_handle handle = 0;
  offload_policy policy = offload_policy::block_level;
};

// ---------------------------------------------------------------- region

/// Owner of a kvtier_region (move-only).
class region {
 public:
  region() noexcept = default;
  explicit region(kvtier_region *adopt) noexcept : h_(adopt) {}
  region(region &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  region &operator=(region &&o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  region(const region &) = delete;
  region &operator=(const region &) = delete;
  ~region() { reset(); }

  /// Options with kvtier's defaults.
  static kvtier_region_options default_options() noexcept { return kvtier_region_options_default(); }

  static result<region> try_create(const kvtier_region_options &o) {
    kvtier_region *h = nullptr;
    kvtier_status s = kvtier_region_new(&o, &h);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    return region(h);
  }
#if KVTIER_HPP_EXCEPTIONS
  static region create(const kvtier_region_options &o) { return detail::unwrap(try_create(o)); }
#endif

  kvtier_region *get() const noexcept { return h_; }
  kvtier_region *release() noexcept { return std::exchange(h_, nullptr); }
  explicit operator bool() const noexcept { return h_ != nullptr; }
  void reset() noexcept {
    if (h_) kvtier_region_free(std::exchange(h_, nullptr));
  }

  result<void *> try_slot_address(uint32_t slot) const {
    void *a = nullptr;
    return detail::check(kvtier_region_slot_address(h_, slot, &a), std::move(a));
  }
  result<uint32_t> try_slot_count() const {
    uint32_t n = 0;
    return detail::check(kvtier_region_slot_count(h_, &n), std::move(n));
  }
  result<std::size_t> try_stride() const {
    std::size_t n = 0;
    return detail::check(kvtier_region_stride(h_, &n), std::move(n));
  }
#if KVTIER_HPP_EXCEPTIONS
  void *slot_address(uint32_t slot) const { return detail::unwrap(try_slot_address(slot)); }
  uint32_t slot_count() const { return detail::unwrap(try_slot_count()); }
  std::size_t stride() const { return detail::unwrap(try_stride()); }
#endif

 private:
  kvtier_region *h_ = nullptr;
};

// --------------------------------------------------------------- primary

/// Owner of a standalone kvtier_primary (move-only); use get() for the
/// rest of the kvtier_primary_* calls.  Like the C handle, not internally
/// synchronized: calls on one primary must not overlap.
class primary {
 public:
  primary() noexcept = default;
  explicit primary(kvtier_primary *adopt) noexcept : h_(adopt) {}
  primary(primary &&o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  primary &operator=(primary &&o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  primary(const primary &) = delete;
  primary &operator=(const primary &) = delete;
  ~primary() { reset(); }

  static kvtier_primary_options default_options() noexcept { return kvtier_primary_options_default(); }
  static result<primary> try_create(const kvtier_primary_options &o) {
    kvtier_primary *h = nullptr;
    kvtier_status s = kvtier_primary_new(&o, &h);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    return primary(h);
  }
#if KVTIER_HPP_EXCEPTIONS
  static primary create(const kvtier_primary_options &o) { return detail::unwrap(try_create(o)); }
#endif

  kvtier_primary *get() const noexcept { return h_; }
  kvtier_primary *release() noexcept { return std::exchange(h_, nullptr); }
  explicit operator bool() const noexcept { return h_ != nullptr; }
  void reset() noexcept {
    if (h_) kvtier_primary_free(std::exchange(h_, nullptr));
  }

  /// Starts a request labelled `name`; its handle, for every later call
  /// of the request.
  result<kvtier_request_handle> try_request_begin(const std::string &name) {
    kvtier_request_handle r = 0;
    return detail::check(kvtier_primary_request_begin(h_, name.c_str(), &r), std::move(r));
  }
  result<void> try_request_finished(kvtier_request_handle request) {
    return detail::check(kvtier_primary_request_finished(h_, request));
  }
  /// Looks `keys` up in order, stopping at the first that is not HIT.
  result<kvtier_lookup_answer> try_lookup(const key_list &keys) {
    kvtier_lookup_answer a{};
    return detail::check(kvtier_primary_lookup(h_, keys.data(), keys.size(), &a), std::move(a));
  }
  result<kvtier_primary_stats> try_stats() {
    kvtier_primary_stats s;
    std::memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    return detail::check(kvtier_primary_read_stats(h_, &s), std::move(s));
  }
#if KVTIER_HPP_EXCEPTIONS
  kvtier_request_handle request_begin(const std::string &name) { return detail::unwrap(try_request_begin(name)); }
  void request_finished(kvtier_request_handle r) { detail::unwrap(try_request_finished(r)); }
  kvtier_lookup_answer lookup(const key_list &keys) { return detail::unwrap(try_lookup(keys)); }
  kvtier_primary_stats stats() { return detail::unwrap(try_stats()); }
#endif

 private:
  kvtier_primary *h_ = nullptr;
};

// ------------------------------------------------------------ tier views

/// A request as a tier sees it (borrowed for the callback).
class request_view {
 public:
  explicit request_view(const kvtier_request *r) noexcept : r_(r) {}
  std::string_view id() const noexcept { return r_ ? std::string_view(r_->id, r_->id_len) : std::string_view(); }
  void *user_data() const noexcept { return r_ ? r_->user_data : nullptr; }
  std::size_t param_count() const noexcept { return r_ ? r_->params_len : 0; }
  /// The value of parameter `name`, if the engine attached it.
  std::optional<std::string_view> param(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < param_count(); ++i)
      if (name == r_->params[i].key) return std::string_view(r_->params[i].value);
    return std::nullopt;
  }
  const kvtier_request *c() const noexcept { return r_; }

 private:
  const kvtier_request *r_;
};

/// A transfer job as a tier sees it (borrowed for the callback: copy what you keep).
class job_view {
 public:
  explicit job_view(const kvtier_job *j) noexcept : j_(j) {}
  uint64_t id() const noexcept { return j_->id; }
  bool is_store() const noexcept { return j_->direction == KVTIER_JOB_STORE; }
  bool is_load() const noexcept { return j_->direction == KVTIER_JOB_LOAD; }
  std::size_t size() const noexcept { return j_->len; }
  key_view key(std::size_t i) const noexcept { return key_view(j_->keys[i]); }
  uint32_t slot(std::size_t i) const noexcept { return j_->slots[i]; }
  request_view request() const noexcept { return request_view(j_->request); }
  const kvtier_job *c() const noexcept { return j_; }

 private:
  const kvtier_job *j_;
};

/// One statistic a C++ tier reports.
struct tier_stat {
  std::string name;
  bool counter = true;
  double value = 0;
};

class manager;

/// Base class of secondary tiers written in C++.  The manager calls these
/// with its lock held (never two at once for one tier), from any thread
/// that calls the manager.  Report finished jobs with report() (any
/// thread, any time after registration).  Throwing from a method (when
/// exceptions are on) fails that call: kvtier sees a failed status
/// (kvtier::error's status, else KVTIER_STATUS_TIER) and logs which
/// callback failed; nothing unwinds into kvtier.
class tier {
 public:
  virtual ~tier() = default;

  /// Short name for stats and errors (copied at registration).
  virtual std::string name() const { return "cxx-tier"; }
  /// Where the tier keeps blocks (medium::any: undeclared).
  virtual kvtier::medium medium() const { return medium::any; }
  /// How far the tier is (locality::any: undeclared).
  virtual kvtier::locality locality() const { return locality::any; }

  virtual tier_lookup lookup(key_view key, request_view request) = 0;
  /// Starts copying the job's (pinned) slots into the tier; a non-OK
  /// status fails the job (kvtier reports it for you).
  virtual kvtier_status submit_store(job_view job) = 0;
  /// Starts copying from the tier into the job's (write pending) slots.
  virtual kvtier_status submit_load(job_view job) = 0;
  virtual void touch(const key_list &keys, request_view request) {
    (void)keys;
    (void)request;
  }
  virtual offload_policy on_new_request(request_view request) {
    (void)request;
    return offload_policy::block_level;
  }
  virtual void on_request_finished(request_view request) { (void)request; }
  virtual void on_schedule_end() {}
  virtual bool has_pending_work() { return false; }
  /// Blocks until none of the tier's copies touches the region.
  virtual kvtier_status drain() { return KVTIER_STATUS_OK; }
  virtual void stats(std::vector<tier_stat> &out) { (void)out; }
  /// Stops the tier: afterwards it no longer touches the region.
  virtual kvtier_status shutdown() { return KVTIER_STATUS_OK; }

  /// The index the manager gave this tier (0 before registration).
  std::size_t index() const noexcept { return index_; }

 protected:
  /// Reports a finished job (thread-safe; wakes the manager's wake-up fd).
  kvtier_status report(uint64_t job, bool success, uint64_t bytes = 0, uint64_t duration_ns = 0) noexcept {
    kvtier_job_result r;
    std::memset(&r, 0, sizeof r);
    r.id = job;
    r.success = success;
    r.bytes = bytes;
    r.duration_ns = duration_ns;
    return report_raw(r);
  }
  /// Announces that `key` became readable (event_kind::stored) or left
  /// the tier (event_kind::removed), or that the tier forgot everything
  /// (event_kind::cleared, key ignored), for KV-aware routers.  Thread-safe;
  /// the manager collects announcements with its events.
  void announce(event_kind kind, key_view key = key_view()) {
    kvtier_tier_event e;
    std::memset(&e, 0, sizeof e);
    e.kind = static_cast<kvtier_event_kind>(kind);
    if (kind != event_kind::cleared) {
      e.key.len = key.size() < sizeof e.key.bytes ? key.size() : sizeof e.key.bytes;
      if (e.key.len > 0) std::memcpy(e.key.bytes, key.data(), e.key.len);
    }
    std::lock_guard<std::mutex> g(events_mu_);
    events_.push_back(e);
  }

  /// Reports a load that failed after `arrived` keys did arrive.
  kvtier_status report_partial(uint64_t job, const key_list &arrived, uint64_t bytes = 0) noexcept {
    kvtier_job_result r;
    std::memset(&r, 0, sizeof r);
    r.id = job;
    r.success = false;
    r.succeeded_keys = arrived.data();
    r.succeeded_len = arrived.size();
    r.bytes = bytes;
    return report_raw(r);
  }

 private:
  kvtier_status report_raw(const kvtier_job_result &r) noexcept {
    if (!manager_) return KVTIER_STATUS_INVALID_ARGUMENT;
    return kvtier_manager_complete_job(manager_, index_, &r);
  }
  friend class manager;
  friend struct tier_adapter;
  const kvtier_manager *manager_ = nullptr;
  std::size_t index_ = 0;
  std::string name_;
  std::vector<kvtier_tier_stat> stat_buf_;
  std::mutex events_mu_;
  std::vector<kvtier_tier_event> events_;
};

/// The C callbacks behind kvtier::tier: every one noexcept, exceptions
/// become failed statuses.
struct tier_adapter {
  static tier &self(void *ud) noexcept { return *static_cast<tier *>(ud); }

  template <class F>
  static int32_t guard(F &&f) noexcept {
#if KVTIER_HPP_EXCEPTIONS
    try {
      return static_cast<int32_t>(f());
    } catch (const error &e) {
      return e.status() == KVTIER_STATUS_OK ? static_cast<int32_t>(KVTIER_STATUS_TIER)
                                            : static_cast<int32_t>(e.status());
    } catch (...) {
      return static_cast<int32_t>(KVTIER_STATUS_TIER);
    }
#else
    return static_cast<int32_t>(f());
#endif
  }

  static int32_t lookup(void *ud, const kvtier_key *key, const kvtier_request *req,
                        kvtier_lookup_result *answer) noexcept {
    return guard([&] {
      *answer = static_cast<kvtier_lookup_result>(self(ud).lookup(key_view(*key), request_view(req)));
      return KVTIER_STATUS_OK;
    });
  }
  static int32_t submit_store(void *ud, const kvtier_job *job) noexcept {
    return guard([&] { return self(ud).submit_store(job_view(job)); });
  }
  static int32_t submit_load(void *ud, const kvtier_job *job) noexcept {
    return guard([&] { return self(ud).submit_load(job_view(job)); });
  }
  static int32_t touch(void *ud, const kvtier_key *keys, std::size_t len, const kvtier_request *req) noexcept {
    return guard([&] {
      self(ud).touch(key_list(keys, len), request_view(req));
      return KVTIER_STATUS_OK;
    });
  }
  static int32_t on_new_request(void *ud, const kvtier_request *req, kvtier_offload_policy *policy) noexcept {
    return guard([&] {
      *policy = static_cast<kvtier_offload_policy>(self(ud).on_new_request(request_view(req)));
      return KVTIER_STATUS_OK;
    });
  }
  static int32_t on_request_finished(void *ud, const kvtier_request *req) noexcept {
    return guard([&] {
      self(ud).on_request_finished(request_view(req));
      return KVTIER_STATUS_OK;
    });
  }
  static int32_t on_schedule_end(void *ud) noexcept {
    return guard([&] {
      self(ud).on_schedule_end();
      return KVTIER_STATUS_OK;
    });
  }
  static int32_t has_pending_work(void *ud, bool *pending) noexcept {
    return guard([&] {
      *pending = self(ud).has_pending_work();
      return KVTIER_STATUS_OK;
    });
  }
  static int32_t drain(void *ud) noexcept {
    return guard([&] { return self(ud).drain(); });
  }
  static int32_t shutdown(void *ud) noexcept {
    return guard([&] { return self(ud).shutdown(); });
  }
  static int32_t stats(void *ud, kvtier_tier_stat *out, std::size_t capacity, std::size_t *written) noexcept {
    return guard([&] {
      tier &t = self(ud);
      // kvtier calls again while the buffer fills: gather once, hand out in chunks.
      if (t.stat_buf_.empty()) {
        std::vector<tier_stat> stats;
        t.stats(stats);
        for (const tier_stat &s : stats) {
          kvtier_tier_stat c;
          std::memset(&c, 0, sizeof c);
          std::size_t n = s.name.size() < sizeof c.name - 1 ? s.name.size() : sizeof c.name - 1;
          std::memcpy(c.name, s.name.data(), n);
          c.kind = s.counter ? KVTIER_STAT_COUNTER : KVTIER_STAT_GAUGE;
          c.value = s.value;
          t.stat_buf_.push_back(c);
        }
      }
      std::size_t n = t.stat_buf_.size() < capacity ? t.stat_buf_.size() : capacity;
      if (n > 0) std::memcpy(out, t.stat_buf_.data(), n * sizeof(kvtier_tier_stat));
      t.stat_buf_.erase(t.stat_buf_.begin(), t.stat_buf_.begin() + static_cast<std::ptrdiff_t>(n));
      *written = n;
      return KVTIER_STATUS_OK;
    });
  }
  static int32_t take_events(void *ud, kvtier_tier_event *out, std::size_t capacity, std::size_t *written) noexcept {
    tier &t = self(ud);
    std::lock_guard<std::mutex> g(t.events_mu_);
    std::size_t n = t.events_.size() < capacity ? t.events_.size() : capacity;
    if (n > 0) std::memcpy(out, t.events_.data(), n * sizeof(kvtier_tier_event));
    t.events_.erase(t.events_.begin(), t.events_.begin() + static_cast<std::ptrdiff_t>(n));
    *written = n;
    return KVTIER_STATUS_OK;
  }
  static void destroy(void *ud) noexcept { delete static_cast<tier *>(ud); }
};

// --------------------------------------------------------------- manager

/// What prepare_store planned: positions in the key list and slots to fill.
struct store_plan {
  /// True: no room; nothing changed.
  bool refused = false;
  /// Positions (in the keys given) of the keys to store, in order.
  std::vector<std::size_t> positions;
  /// The slot of each key to store (co-indexed with positions).
  std::vector<uint32_t> slots;
  /// Keys the primary tier evicted to make room.
  std::vector<key_bytes> evicted;
};

/// Consecutive cache events of one tier and kind, as the event callback
/// receives them (keys borrowed for the callback: copy what you keep).
struct event_view {
  uint32_t tier = 0;
  event_kind kind = event_kind::stored;
  kvtier::medium medium = medium::any;
  kvtier::locality locality = locality::any;
  key_list keys;
};

/// Consecutive cache events of one tier and kind, copied (drained with
/// manager::take_events).
struct event {
  uint32_t tier = 0;
  event_kind kind = event_kind::stored;
  kvtier::medium medium = medium::any;
  kvtier::locality locality = locality::any;
  std::vector<key_bytes> keys;
};

/// Where a manager built from JSON keeps its slots.
struct slot_memory {
  void *base = nullptr;
  std::size_t stride = 0;
  std::size_t slot_bytes = 0;
  uint32_t slot_count = 0;
  void *slot(uint32_t i) const noexcept { return static_cast<char *>(base) + std::size_t(i) * stride; }
};

/// What a manager made by manager::connect is connected to
/// (kvtier_server_info, its strings copied): the server's region, its
/// primary tier's capacity, the layout fingerprint, this connection's id
/// and the protocol spoken.
struct server_info {
  uint32_t protocol = 0;
  uint64_t client_id = 0;
  std::string region_name;
  std::string region_directory;
  std::string fingerprint;
  uint32_t slot_count = 0;
  uint64_t slot_bytes = 0;
  uint64_t slot_stride = 0;
  uint32_t capacity = 0;
};

/// Counts per tier of a request report (borrowed for the callback): entry
/// 0 the primary tier, entry t secondary tier t.
class tier_counts {
 public:
  tier_counts() noexcept = default;
  tier_counts(const uint64_t *data, std::size_t size) noexcept : data_(data), size_(data ? size : 0) {}
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  uint64_t operator[](std::size_t tier) const noexcept { return data_[tier]; }
  const uint64_t *begin() const noexcept { return data_; }
  const uint64_t *end() const noexcept { return data_ + size_; }

 private:
  const uint64_t *data_ = nullptr;
  std::size_t size_ = 0;
};

/// What happened to one finished request, as the report callback receives
/// it (kvtier_request_report; borrowed for the callback: copy what you
/// keep).  Fields the library's report does not have (an older library)
/// read 0.
struct request_report_view {
  kvtier_request_handle request = 0;
  std::string_view name;
  uint64_t lookups = 0;
  tier_counts tier_hits;
  uint64_t loaded = 0;
  uint64_t stored = 0;
  uint64_t promoted = 0;
  uint64_t failed = 0;
  uint64_t promotion_wait_ns = 0;
  uint64_t asked = 0;
  tier_counts tier_served;
  uint64_t recomputed = 0;
  uint64_t steps_waited = 0;

  /// The view of `r`, reading only the fields inside its struct_size.
  static request_report_view of(const kvtier_request_report &r) noexcept {
    auto has = [&r](std::size_t offset, std::size_t size) noexcept { return offset + size <= r.struct_size; };
#define KVTIER_HPP_REPORT_HAS(field) has(offsetof(kvtier_request_report, field), sizeof(r.field))
    request_report_view v;
    if (KVTIER_HPP_REPORT_HAS(request)) v.request = r.request;
    if (KVTIER_HPP_REPORT_HAS(name) && r.name) v.name = r.name;
    if (KVTIER_HPP_REPORT_HAS(lookups)) v.lookups = r.lookups;
    std::size_t tiers = KVTIER_HPP_REPORT_HAS(tier_count) ? r.tier_count : 0;
    if (KVTIER_HPP_REPORT_HAS(tier_hits)) v.tier_hits = tier_counts(r.tier_hits, tiers);
    if (KVTIER_HPP_REPORT_HAS(loaded)) v.loaded = r.loaded;
    if (KVTIER_HPP_REPORT_HAS(stored)) v.stored = r.stored;
    if (KVTIER_HPP_REPORT_HAS(promoted)) v.promoted = r.promoted;
    if (KVTIER_HPP_REPORT_HAS(failed)) v.failed = r.failed;
    if (KVTIER_HPP_REPORT_HAS(promotion_wait_ns)) v.promotion_wait_ns = r.promotion_wait_ns;
    if (KVTIER_HPP_REPORT_HAS(asked)) v.asked = r.asked;
    if (KVTIER_HPP_REPORT_HAS(tier_served)) v.tier_served = tier_counts(r.tier_served, tiers);
    if (KVTIER_HPP_REPORT_HAS(recomputed)) v.recomputed = r.recomputed;
    if (KVTIER_HPP_REPORT_HAS(steps_waited)) v.steps_waited = r.steps_waited;
#undef KVTIER_HPP_REPORT_HAS
    return v;
  }
};

/// Owner of a kvtier_manager (move-only).  Internally synchronized like
/// the C handle; complete_job may be called from any thread.
class manager {
 public:
  using event_callback = std::function<void(const event_view &)>;
  using report_callback = std::function<void(const request_report_view &)>;

  manager() noexcept = default;
  explicit manager(kvtier_manager *adopt) noexcept : h_(adopt) {}
  manager(manager &&o) noexcept
      : h_(std::exchange(o.h_, nullptr)), events_(std::move(o.events_)), reports_(std::move(o.reports_)) {}
  manager &operator=(manager &&o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
      events_ = std::move(o.events_);
      reports_ = std::move(o.reports_);
    }
    return *this;
  }
  manager(const manager &) = delete;
  manager &operator=(const manager &) = delete;
  ~manager() { reset(); }

  static kvtier_manager_options default_options() noexcept { return kvtier_manager_options_default(); }
  static kvtier_tier_options default_tier_options() noexcept { return kvtier_tier_options_default(); }

  /// A manager without slot memory (only C and C++ tiers, which bring
  /// their own), or over `slots`: the region's slots are then the
  /// manager's, the built-in tiers copy through them, and the manager
  /// keeps them mapped (the region owner may go first).
  static result<manager> try_create(const kvtier_manager_options &o) { return try_new(o, nullptr); }
  static result<manager> try_create(const kvtier_manager_options &o, const region &slots) {
    if (!slots) return error_info{KVTIER_STATUS_NULL_ARGUMENT, "manager: no region given"};
    return try_new(o, slots.get());
  }
  /// A manager from a JSON document (docs/configuration.md).
  static result<manager> try_from_json(std::string_view json) {
    kvtier_manager *h = nullptr;
    kvtier_status s = kvtier_manager_new_from_json(json.data(), json.size(), &h);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    return manager(h);
  }
  /// A manager from a JSON document over `slots`, a region's slots (the
  /// document names no region of its own).
  static result<manager> try_from_json(std::string_view json, const region &slots) {
    if (!slots) return error_info{KVTIER_STATUS_NULL_ARGUMENT, "manager: no region given"};
    kvtier_manager *h = nullptr;
    kvtier_status s = kvtier_manager_new_from_json_with_region(json.data(), json.size(), slots.get(), &h);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    return manager(h);
  }
  static kvtier_connect_options default_connect_options() noexcept { return kvtier_connect_options_default(); }
  /// A manager in the node server kvtierd listening on `socket_path`
  /// (kvtier_manager_connect): blocks shared with every engine connected
  /// to it, requests this handle's, the server's region mapped here
  /// (slots()).  Tiers, events, callbacks, the wake-up descriptor and
  /// resets are the server's (KVTIER_STATUS_UNSUPPORTED); a layout other
  /// than the server's is KVTIER_STATUS_INVALID_ARGUMENT; no server, or
  /// one gone, KVTIER_STATUS_DISCONNECTED (then for every later call).
  static result<manager> try_connect(const std::string &socket_path,
                                     const kvtier_connect_options &o = kvtier_connect_options_default()) {
    kvtier_manager *h = nullptr;
    kvtier_status s = kvtier_manager_connect(socket_path.c_str(), &o, &h);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    return manager(h);
  }
#if KVTIER_HPP_EXCEPTIONS
  static manager connect(const std::string &socket_path,
                         const kvtier_connect_options &o = kvtier_connect_options_default()) {
    return detail::unwrap(try_connect(socket_path, o));
  }
  static manager create(const kvtier_manager_options &o) { return detail::unwrap(try_create(o)); }
  static manager create(const kvtier_manager_options &o, const region &slots) {
    return detail::unwrap(try_create(o, slots));
  }
  static manager from_json(std::string_view json) { return detail::unwrap(try_from_json(json)); }
  static manager from_json(std::string_view json, const region &slots) {
    return detail::unwrap(try_from_json(json, slots));
  }
#endif

  kvtier_manager *get() const noexcept { return h_; }
  kvtier_manager *release() noexcept { return std::exchange(h_, nullptr); }
  explicit operator bool() const noexcept { return h_ != nullptr; }
  /// Frees the manager (shutting its tiers down, destroying C++ tiers).
  void reset() noexcept {
    if (h_) kvtier_manager_free(std::exchange(h_, nullptr));
    events_.reset();
    reports_.reset();
  }

  /// Registers a C++ tier; the manager owns it from then on.  On failure
  /// the tier is destroyed here and the error returned.
  result<std::size_t> try_add_tier(std::unique_ptr<tier> t,
                                   const kvtier_tier_options &o = kvtier_tier_options_default()) {
    if (!t) return error_info{KVTIER_STATUS_NULL_ARGUMENT, "add_tier: no tier given"};
    t->name_ = t->name();
    t->manager_ = h_;
    kvtier_tier_vtable vt = kvtier_tier_vtable_default();
    vt.user_data = t.get();
    vt.name = t->name_.c_str();
    vt.medium = static_cast<kvtier_medium>(t->medium());
    vt.locality = static_cast<kvtier_locality>(t->locality());
    vt.lookup = &tier_adapter::lookup;
    vt.submit_store = &tier_adapter::submit_store;
    vt.submit_load = &tier_adapter::submit_load;
    vt.touch = &tier_adapter::touch;
    vt.on_new_request = &tier_adapter::on_new_request;
    vt.on_request_finished = &tier_adapter::on_request_finished;
    vt.on_schedule_end = &tier_adapter::on_schedule_end;
    vt.has_pending_work = &tier_adapter::has_pending_work;
    vt.drain = &tier_adapter::drain;
    vt.stats = &tier_adapter::stats;
    vt.shutdown = &tier_adapter::shutdown;
    vt.destroy = &tier_adapter::destroy;
    vt.take_events = &tier_adapter::take_events;
    std::size_t index = 0;
    // The index must be known before any callback can report: it is
    // written before add_tier returns, and no job exists before that.
    kvtier_status s = kvtier_manager_add_tier(h_, &vt, &o, &index);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    t->index_ = index;
    t.release();  // owned by the manager now: destroy deletes it
    return index;
  }
  /// Registers a C vtable tier (see kvtier_tier_vtable).
  result<std::size_t> try_add_tier(const kvtier_tier_vtable &vt,
                                   const kvtier_tier_options &o = kvtier_tier_options_default()) {
    std::size_t index = 0;
    return detail::check(kvtier_manager_add_tier(h_, &vt, &o, &index), std::move(index));
  }

  /// Adds the built-in file-system tier over the manager's slots (see
  /// kvtier_fs_options; a manager without slot memory refuses it).
  result<std::size_t> try_add_fs_tier(const kvtier_fs_options &o) {
    std::size_t index = 0;
    return detail::check(kvtier_manager_add_fs_tier(h_, &o, &index), std::move(index));
  }

  /// Adds the built-in redis tier over the manager's slots (see
  /// kvtier_redis_options; KVTIER_STATUS_UNSUPPORTED if kvtier was built
  /// without it).
  result<std::size_t> try_add_redis_tier(const kvtier_redis_options &o) {
    std::size_t index = 0;
    return detail::check(kvtier_manager_add_redis_tier(h_, &o, &index), std::move(index));
  }

  /// Starts request `name` (unique among active requests): its handle,
  /// which every later call of the request takes, and the offload policy.
  result<started_request> try_request_begin(const std::string &name,
                                            const kvtier_request_params *params = nullptr) {
    started_request r;
    kvtier_offload_policy p = KVTIER_OFFLOAD_BLOCK_LEVEL;
    kvtier_status s = kvtier_manager_request_begin(h_, name.c_str(), params, &r.handle, &p);
    r.policy = static_cast<offload_policy>(p);
    return detail::check(s, std::move(r));
  }
  /// Looks `keys` up as a prefix and starts, in one call, the promotions
  /// of every key of it the secondary tiers hold (kvtier_manager_lookup;
  /// one key converts to a key_list).  While the answer's `pending` is
  /// above 0, ask again next step (after schedule_end); then load its
  /// `hits` keys and compute the rest.
  result<lookup_answer> try_lookup(kvtier_request_handle request, const key_list &keys) const {
    kvtier_lookup_answer a;
    std::memset(&a, 0, sizeof a);
    kvtier_status s = kvtier_manager_lookup(h_, request, keys.data(), keys.size(), &a);
    return detail::check(s, answer_of(a));
  }
  /// vLLM 0.33's per-key answers: looks `keys` up one at a time, in
  /// order, up to the first that is not a hit
  /// (kvtier_manager_lookup_per_key: one promotion per call).
  result<lookup_answer> try_lookup_per_key(kvtier_request_handle request, const key_list &keys) const {
    kvtier_lookup_answer a;
    std::memset(&a, 0, sizeof a);
    kvtier_status s = kvtier_manager_lookup_per_key(h_, request, keys.data(), keys.size(), &a);
    return detail::check(s, answer_of(a));
  }
  /// Pins ready keys for a load to the GPU; their slots, in key order.
  result<std::vector<uint32_t>> try_prepare_load(kvtier_request_handle request, const key_list &keys) const {
    std::vector<uint32_t> slots(keys.size());
    kvtier_status s = kvtier_manager_prepare_load(h_, request, keys.data(), keys.size(), slots.data());
    return detail::check(s, std::move(slots));
  }
  /// Gives keys of `request` their token positions (positions[i] for keys[i]).
  result<void> try_set_positions(kvtier_request_handle request, const key_list &keys,
                                 const std::vector<uint64_t> &positions) const {
    if (positions.size() != keys.size())
      return error_info{KVTIER_STATUS_INVALID_ARGUMENT, "set_positions: one position per key"};
    return detail::check(kvtier_manager_set_positions(h_, request, keys.data(), keys.size(), positions.data()));
  }
  result<void> try_touch(kvtier_request_handle request, const key_list &keys) const {
    return detail::check(kvtier_manager_touch(h_, request, keys.data(), keys.size()));
  }
  result<void> try_complete_load(kvtier_request_handle request, const key_list &keys) const {
    return detail::check(kvtier_manager_complete_load(h_, request, keys.data(), keys.size()));
  }
  result<store_plan> try_prepare_store(kvtier_request_handle request, const key_list &keys) const {
    store_plan plan;
    plan.positions.resize(keys.size());
    plan.slots.resize(keys.size());
    std::vector<kvtier_key_buf> ev(keys.size());
    kvtier_store_plan c;
    std::memset(&c, 0, sizeof c);
    c.store_indices = plan.positions.data();
    c.slots = plan.slots.data();
    c.evicted = ev.data();
    kvtier_status s = kvtier_manager_prepare_store(h_, request, keys.data(), keys.size(), &c);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    plan.refused = c.refused;
    plan.positions.resize(c.store_count);
    plan.slots.resize(c.store_count);
    for (std::size_t i = 0; i < c.evicted_count && i < ev.size(); ++i)
      plan.evicted.push_back(copy_key(ev[i].bytes, ev[i].len));
    return plan;
  }
  /// Finishes (part of) `request`'s store: only keys its own prepare_store
  /// planned, still being written for it, are acted on; a key named that
  /// was left alone (another request's, ready, absent) makes the result a
  /// KVTIER_STATUS_KEYS_IGNORED error whose message counts them (the
  /// request's own keys were completed all the same).
  result<kvtier_store_completion> try_complete_store(kvtier_request_handle request, const key_list &keys,
                                                     bool success) const {
    kvtier_store_completion done;
    std::memset(&done, 0, sizeof done);
    return detail::check(kvtier_manager_complete_store(h_, request, keys.data(), keys.size(), success, &done),
                         std::move(done));
  }
  result<void> try_request_finished(kvtier_request_handle request) const {
    return detail::check(kvtier_manager_request_finished(h_, request));
  }
  result<void> try_schedule_end() const { return detail::check(kvtier_manager_schedule_end(h_)); }
  result<bool> try_has_pending_work() const {
    bool p = false;
    return detail::check(kvtier_manager_has_pending_work(h_, &p), std::move(p));
  }
  /// Drains every queued event (copying the keys; the call's own event
  /// buffer holds them meanwhile, so any thread may drain).
  result<std::vector<event>> try_take_events() const {
    std::vector<event> out;
    kvtier_event buf[64];
    kvtier_event_buffer *keys = nullptr;
    kvtier_status made = kvtier_event_buffer_new(&keys);
    if (made != KVTIER_STATUS_OK) return last_error(made);
    std::unique_ptr<kvtier_event_buffer, void (*)(kvtier_event_buffer *)> owned(keys, &kvtier_event_buffer_free);
    for (;;) {
      std::size_t n = 0;
      bool more = false;
      kvtier_status s = kvtier_manager_take_events(h_, keys, buf, 64, &n, &more);
      if (s != KVTIER_STATUS_OK) return last_error(s);
      for (std::size_t i = 0; i < n; ++i) {
        event e{buf[i].tier, static_cast<event_kind>(buf[i].kind), static_cast<kvtier::medium>(buf[i].medium),
                static_cast<kvtier::locality>(buf[i].locality), {}};
        for (std::size_t k = 0; k < buf[i].len; ++k)
          e.keys.push_back(copy_key(buf[i].keys[k].data, buf[i].keys[k].len));
        out.push_back(std::move(e));
      }
      if (!more) return out;
    }
  }
  /// The manager's own statistics (each tier's: try_tier_stats).
  result<kvtier_manager_stats> try_stats() const {
    kvtier_manager_stats st;
    std::memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    return detail::check(kvtier_manager_read_stats(h_, &st), std::move(st));
  }
  /// The statistics of tier `tier` (0 the primary tier, 1.. secondary tiers).
  result<std::vector<kvtier_tier_stat>> try_tier_stats(std::size_t tier) const {
    std::vector<kvtier_tier_stat> out;
    for (;;) {
      std::size_t written = 0;
      kvtier_status s = kvtier_manager_read_tier_stats(h_, tier, out.data(), out.size(), &written);
      if (s == KVTIER_STATUS_OK) {
        out.resize(written);
        return out;
      }
      if (s != KVTIER_STATUS_BUFFER_TOO_SMALL) return last_error(s);
      out.resize(written);
    }
  }
  /// The oldest message of the error log, if any.
  result<std::optional<std::string>> try_take_error() const {
    std::string msg(256, '\0');
    for (;;) {
      std::size_t written = 0;
      kvtier_status s = kvtier_manager_take_error(h_, &msg[0], msg.size(), &written);
      if (s == KVTIER_STATUS_OK) {
        if (written == 0) return std::optional<std::string>();
        msg.resize(written - 1);
        return std::optional<std::string>(std::move(msg));
      }
      if (s != KVTIER_STATUS_BUFFER_TOO_SMALL) return last_error(s);
      msg.assign(written, '\0');
    }
  }
  /// Holds `keys` resident in tier `tier` (0 the primary tier) as pin set
  /// `name`, replacing a set of that name; past pinning.max_share
  /// KVTIER_STATUS_NO_SPACE with nothing changed.
  result<kvtier_pin_outcome> try_pin_set(const std::string &name, const key_list &keys,
                                         std::size_t tier = 0) const {
    kvtier_pin_outcome o;
    std::memset(&o, 0, sizeof o);
    return detail::check(kvtier_manager_pin_set(h_, name.c_str(), tier, keys.data(), keys.size(), &o),
                         std::move(o));
  }
  /// Releases pin set `name`; the number of keys it held.
  result<std::size_t> try_unpin_set(const std::string &name) const {
    std::size_t n = 0;
    return detail::check(kvtier_manager_unpin_set(h_, name.c_str(), &n), std::move(n));
  }
  /// The pin sets, by name.
  result<std::vector<kvtier_pin_set_info>> try_pin_sets() const {
    std::vector<kvtier_pin_set_info> out;
    for (;;) {
      std::size_t written = 0;
      kvtier_status s = kvtier_manager_pin_sets(h_, out.data(), out.size(), &written);
      if (s == KVTIER_STATUS_OK) {
        out.resize(written);
        return out;
      }
      if (s != KVTIER_STATUS_BUFFER_TOO_SMALL) return last_error(s);
      out.resize(written);
    }
  }
  /// Drops the blocks whose keys start with `key_prefix` (all for an empty
  /// one) from the tiers with layout fingerprint `fingerprint` (every tier
  /// for nullptr).
  result<kvtier_drop_report> try_drop_blocks(const std::string &key_prefix,
                                             const char *fingerprint = nullptr) const {
    kvtier_drop_selector sel;
    std::memset(&sel, 0, sizeof sel);
    sel.struct_size = sizeof sel;
    sel.key_prefix = reinterpret_cast<const uint8_t *>(key_prefix.data());
    sel.key_prefix_len = key_prefix.size();
    sel.fingerprint = fingerprint;
    kvtier_drop_report r;
    std::memset(&r, 0, sizeof r);
    return detail::check(kvtier_manager_drop_blocks(h_, &sel, &r), std::move(r));
  }
  result<void> try_reset_cache() const { return detail::check(kvtier_manager_reset_cache(h_)); }
  result<void> try_reset_flushed() const { return detail::check(kvtier_manager_reset_flushed(h_)); }
  result<void> try_shutdown() const { return detail::check(kvtier_manager_shutdown(h_)); }
  /// Reports a finished job of tier `index` (thread-safe); only a C vtable
  /// tier's index is accepted, a built-in tier's is INVALID_ARGUMENT.
  result<void> try_complete_job(std::size_t index, const kvtier_job_result &r) const {
    return detail::check(kvtier_manager_complete_job(h_, index, &r));
  }
  /// Every tier's counters and gauges in the Prometheus text format.
  result<std::string> try_metrics_prometheus() const {
    std::string text(4096, '\0');
    for (;;) {
      std::size_t written = 0;
      kvtier_status s = kvtier_manager_metrics_prometheus(h_, &text[0], text.size(), &written);
      if (s == KVTIER_STATUS_OK) {
        text.resize(written - 1);
        return text;
      }
      if (s != KVTIER_STATUS_BUFFER_TOO_SMALL) return last_error(s);
      text.assign(written + written / 4, '\0');
    }
  }
  /// The wake-up descriptor: readable when jobs finish; read 8 bytes to reset.
  result<int> try_wake_fd() const {
    int fd = -1;
    return detail::check(kvtier_manager_wake_fd(h_, &fd), std::move(fd));
  }
  /// What a manager made by try_connect is connected to;
  /// KVTIER_STATUS_NOT_FOUND for a local manager.
  result<kvtier::server_info> try_server_info() const {
    kvtier_server_info c{};
    c.struct_size = sizeof c;
    kvtier_status s = kvtier_manager_server_info(h_, &c);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    kvtier::server_info info;
    info.protocol = c.protocol;
    info.client_id = c.client_id;
    info.region_name = c.region_name ? c.region_name : "";
    info.region_directory = c.region_directory ? c.region_directory : "";
    info.fingerprint = c.fingerprint ? c.fingerprint : "";
    info.slot_count = c.slot_count;
    info.slot_bytes = c.slot_bytes;
    info.slot_stride = c.slot_stride;
    info.capacity = c.capacity;
    return info;
  }  /// Where the /metrics endpoint listens ("127.0.0.1:40123",
  /// "[::1]:40123"; the port picked for port 0); KVTIER_STATUS_NOT_FOUND
  /// for a manager without one (connected ones included).
  result<std::string> try_metrics_address() const {
    char text[64];
    std::size_t written = 0;
    kvtier_status s = kvtier_manager_metrics_address(h_, text, sizeof text, &written);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    return std::string(text, written - 1);
  }
  /// Why the manager or a tier cannot be used now, one line per reason;
  /// empty when it is ready (what /readyz serves).
  result<std::string> try_readiness() const {
    std::string text(256, '\0');
    for (;;) {
      std::size_t written = 0;
      kvtier_status s = kvtier_manager_readiness(h_, &text[0], text.size(), &written);
      if (s == KVTIER_STATUS_OK) {
        text.resize(written - 1);
        return text;
      }
      if (s != KVTIER_STATUS_BUFFER_TOO_SMALL) return last_error(s);
      text.assign(written + written / 4, '\0');
    }
  }

  /// Where the manager's slots are (its region's, or from JSON block_bytes).
  result<slot_memory> try_slots() const {
    slot_memory m;
    return detail::check(kvtier_manager_slot_memory(h_, &m.base, &m.stride, &m.slot_bytes, &m.slot_count),
                         std::move(m));
  }
  /// Installs (or, with an empty function, removes) the event callback.
  /// It runs with the manager's lock held: it must not call the manager.
  /// Exceptions it throws are swallowed (they never reach kvtier).
  result<void> try_set_event_callback(event_callback cb, bool also_queue = false) {
    if (!cb) {
      kvtier_status s = kvtier_manager_set_event_callback(h_, nullptr, nullptr, also_queue);
      if (s == KVTIER_STATUS_OK) events_.reset();
      return detail::check(s);
    }
    auto holder = std::make_unique<event_callback>(std::move(cb));
    kvtier_status s = kvtier_manager_set_event_callback(h_, &deliver_events, holder.get(), also_queue);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    events_ = std::move(holder);
    return {};
  }

  /// Installs (or, with an empty function, removes) the request report
  /// callback: a request_report_view for each request the manager lets go
  /// from then on (kvtier_manager_set_request_report_callback).  It runs
  /// with the manager's lock held: it must not call the manager.
  /// Exceptions it throws are swallowed (they never reach kvtier).
  result<void> try_set_request_report_callback(report_callback cb) {
    if (!cb) {
      kvtier_status s = kvtier_manager_set_request_report_callback(h_, nullptr, nullptr);
      if (s == KVTIER_STATUS_OK) reports_.reset();
      return detail::check(s);
    }
    auto holder = std::make_unique<report_callback>(std::move(cb));
    kvtier_status s = kvtier_manager_set_request_report_callback(h_, &deliver_report, holder.get());
    if (s != KVTIER_STATUS_OK) return last_error(s);
    reports_ = std::move(holder);
    return {};
  }
#if KVTIER_HPP_EXCEPTIONS
  std::size_t add_tier(std::unique_ptr<tier> t, const kvtier_tier_options &o = kvtier_tier_options_default()) {
    return detail::unwrap(try_add_tier(std::move(t), o));
  }
  std::size_t add_tier(const kvtier_tier_vtable &vt, const kvtier_tier_options &o = kvtier_tier_options_default()) {
    return detail::unwrap(try_add_tier(vt, o));
  }
  std::size_t add_fs_tier(const kvtier_fs_options &o) { return detail::unwrap(try_add_fs_tier(o)); }
  std::size_t add_redis_tier(const kvtier_redis_options &o) { return detail::unwrap(try_add_redis_tier(o)); }
  started_request request_begin(const std::string &name, const kvtier_request_params *p = nullptr) {
    return detail::unwrap(try_request_begin(name, p));
  }
  lookup_answer lookup(kvtier_request_handle r, const key_list &k) const { return detail::unwrap(try_lookup(r, k)); }
  lookup_answer lookup_per_key(kvtier_request_handle r, const key_list &k) const {
    return detail::unwrap(try_lookup_per_key(r, k));
  }
  std::vector<uint32_t> prepare_load(kvtier_request_handle r, const key_list &k) const {
    return detail::unwrap(try_prepare_load(r, k));
  }
  void set_positions(kvtier_request_handle r, const key_list &k, const std::vector<uint64_t> &positions) const {
    detail::unwrap(try_set_positions(r, k, positions));
  }
  void touch(kvtier_request_handle r, const key_list &k) const { detail::unwrap(try_touch(r, k)); }
  void complete_load(kvtier_request_handle r, const key_list &k) const { detail::unwrap(try_complete_load(r, k)); }
  store_plan prepare_store(kvtier_request_handle r, const key_list &k) const {
    return detail::unwrap(try_prepare_store(r, k));
  }
  kvtier_store_completion complete_store(kvtier_request_handle r, const key_list &k, bool success) const {
    return detail::unwrap(try_complete_store(r, k, success));
  }
  void request_finished(kvtier_request_handle r) const { detail::unwrap(try_request_finished(r)); }
  void schedule_end() const { detail::unwrap(try_schedule_end()); }
  bool has_pending_work() const { return detail::unwrap(try_has_pending_work()); }
  std::vector<event> take_events() const { return detail::unwrap(try_take_events()); }
  kvtier_manager_stats stats() const { return detail::unwrap(try_stats()); }
  std::vector<kvtier_tier_stat> tier_stats(std::size_t tier) const { return detail::unwrap(try_tier_stats(tier)); }
  std::optional<std::string> take_error() const { return detail::unwrap(try_take_error()); }
  kvtier_pin_outcome pin_set(const std::string &name, const key_list &k, std::size_t tier = 0) const {
    return detail::unwrap(try_pin_set(name, k, tier));
  }
  std::size_t unpin_set(const std::string &name) const { return detail::unwrap(try_unpin_set(name)); }
  std::vector<kvtier_pin_set_info> pin_sets() const { return detail::unwrap(try_pin_sets()); }
  kvtier_drop_report drop_blocks(const std::string &key_prefix, const char *fingerprint = nullptr) const {
    return detail::unwrap(try_drop_blocks(key_prefix, fingerprint));
  }
  void reset_cache() const { detail::unwrap(try_reset_cache()); }
  void reset_flushed() const { detail::unwrap(try_reset_flushed()); }
  void shutdown() const { detail::unwrap(try_shutdown()); }
  void complete_job(std::size_t index, const kvtier_job_result &r) const {
    detail::unwrap(try_complete_job(index, r));
  }
  std::string metrics_prometheus() const { return detail::unwrap(try_metrics_prometheus()); }
  int wake_fd() const { return detail::unwrap(try_wake_fd()); }
  slot_memory slots() const { return detail::unwrap(try_slots()); }
  kvtier::server_info server_info() const { return detail::unwrap(try_server_info()); }
  std::string metrics_address() const { return detail::unwrap(try_metrics_address()); }
  std::string readiness() const { return detail::unwrap(try_readiness()); }
  void set_event_callback(event_callback cb, bool also_queue = false) {
    detail::unwrap(try_set_event_callback(std::move(cb), also_queue));
  }
  void set_request_report_callback(report_callback cb) {
    detail::unwrap(try_set_request_report_callback(std::move(cb)));
  }
#endif

 private:
  static result<manager> try_new(const kvtier_manager_options &o, const kvtier_region *slots) {
    kvtier_manager *h = nullptr;
    kvtier_status s = kvtier_manager_new(&o, slots, &h);
    if (s != KVTIER_STATUS_OK) return last_error(s);
    return manager(h);
  }

  static lookup_answer answer_of(const kvtier_lookup_answer &a) noexcept {
    lookup_answer r;
    r.hits = a.hits;
    r.stop = static_cast<lookup_result>(a.stop);
    r.reason = static_cast<miss_reason>(a.reason);
    r.pending = a.pending;
    r.end = a.end;
    return r;
  }

  static void deliver_events(void *ud, const kvtier_event *e) noexcept {
    const event_callback &cb = *static_cast<const event_callback *>(ud);
    event_view view{e->tier, static_cast<event_kind>(e->kind), static_cast<kvtier::medium>(e->medium),
                    static_cast<kvtier::locality>(e->locality), key_list(e->keys, e->len)};
#if KVTIER_HPP_EXCEPTIONS
    try {
      cb(view);
    } catch (...) {
      // Never unwind into kvtier.
    }
#else
    cb(view);
#endif
  }

  static void deliver_report(void *ud, const kvtier_request_report *r) noexcept {
    const report_callback &cb = *static_cast<const report_callback *>(ud);
    request_report_view view = request_report_view::of(*r);
#if KVTIER_HPP_EXCEPTIONS
    try {
      cb(view);
    } catch (...) {
      // Never unwind into kvtier.
    }
#else
    cb(view);
#endif
  }

  kvtier_manager *h_ = nullptr;
  std::unique_ptr<event_callback> events_;
  std::unique_ptr<report_callback> reports_;
};

// ------------------------------------------------------------ logging

/// Routes kvtier's log records to `sink(level, target, message)` at
/// `max_level` or more severe; an empty function removes it.  Process-wide.
/// The sink may be called from any thread, concurrently; exceptions it
/// throws are swallowed.
inline result<void> try_set_log_callback(std::function<void(kvtier_log_level, std::string_view, std::string_view)> sink,
                                         kvtier_log_level max_level = KVTIER_LOG_LEVEL_WARN) {
  using sink_t = std::function<void(kvtier_log_level, std::string_view, std::string_view)>;
  static std::unique_ptr<sink_t> current;
  struct tramp {
    static void call(void *ud, int32_t level, const char *target, const char *message) noexcept {
      const sink_t &s = *static_cast<const sink_t *>(ud);
#if KVTIER_HPP_EXCEPTIONS
      try {
        s(static_cast<kvtier_log_level>(level), target, message);
      } catch (...) {
      }
#else
      s(static_cast<kvtier_log_level>(level), target, message);
#endif
    }
  };
  if (!sink) {
    kvtier_status s = kvtier_set_log_callback(nullptr, nullptr, KVTIER_LOG_LEVEL_OFF);
    if (s == KVTIER_STATUS_OK) current.reset();
    return detail::check(s);
  }
  auto next = std::make_unique<sink_t>(std::move(sink));
  kvtier_status s = kvtier_set_log_callback(&tramp::call, next.get(), max_level);
  if (s != KVTIER_STATUS_OK) return last_error(s);
  // The previous sink may still be running on another thread for a moment;
  // it is kept alive until the next replacement.
  static std::unique_ptr<sink_t> previous;
  previous = std::move(current);
  current = std::move(next);
  return {};
}
#if KVTIER_HPP_EXCEPTIONS
inline void set_log_callback(std::function<void(kvtier_log_level, std::string_view, std::string_view)> sink,
                             kvtier_log_level max_level = KVTIER_LOG_LEVEL_WARN) {
  detail::unwrap(try_set_log_callback(std::move(sink), max_level));
}
#endif

}  // namespace kvtier

#endif  // KVTIER_HPP
