// server_connect.cpp: two engines in one node server kvtierd through
// kvtier::manager::connect.  Run by cxx/server_connect_test.sh, which
// starts the server (fingerprint "model-a", 4096-byte blocks) and passes
// its socket path; a missing socket is tested first, without a server.
//
//   server_connect SOCKET
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kvtier.hpp"

namespace {

int failures = 0;

void expect(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "server_connect: FAILED: %s\n", what);
    ++failures;
  }
}

kvtier_connect_options options(const char *fingerprint) {
  kvtier_connect_options o = kvtier::manager::default_connect_options();
  o.fingerprint = fingerprint;
  o.block_bytes = 4096;
  return o;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: server_connect SOCKET\n");
    return 2;
  }
  const std::string socket = argv[1];

  // No server at the path: DISCONNECTED, as a result and as an exception.
  auto absent = kvtier::manager::try_connect(socket + ".absent");
  expect(!absent && absent.error().status == KVTIER_STATUS_DISCONNECTED, "a missing socket is DISCONNECTED");
  try {
    kvtier::manager::connect(socket + ".absent");
    expect(false, "connect to a missing socket throws");
  } catch (const kvtier::error &e) {
    expect(e.status() == KVTIER_STATUS_DISCONNECTED, "the exception carries DISCONNECTED");
  }

  // Another model's engine is refused.
  auto other = kvtier::manager::try_connect(socket, options("model-b"));
  expect(!other && other.error().status == KVTIER_STATUS_INVALID_ARGUMENT, "a wrong fingerprint is refused");

  kvtier::manager a = kvtier::manager::connect(socket, options("model-a"));
  kvtier::manager b = kvtier::manager::connect(socket, options("model-a"));
  kvtier::server_info info = a.server_info();
  expect(info.fingerprint == "model-a" && info.slot_bytes == 4096 && info.slot_count == 16 && info.capacity == 16,
         "server_info names the server's layout");
  expect(!info.region_name.empty() && !info.region_directory.empty(), "server_info names the region");
  expect(info.client_id != b.server_info().client_id, "each connection has its own id");

  // A block stored through one engine is a hit, with its bytes, for the other.
  const kvtier::key_view key("block-0000001");
  auto writer = a.request_begin("writer");
  kvtier::store_plan plan = a.prepare_store(writer.handle, key);
  expect(plan.slots.size() == 1, "one slot planned");
  if (plan.slots.size() == 1) {
    kvtier::slot_memory slots = a.slots();
    std::memset(slots.slot(plan.slots[0]), 0x5A, slots.slot_bytes);
    a.complete_store(writer.handle, key, true);
  }
  a.request_finished(writer.handle);
  auto reader = b.request_begin("reader");
  expect(b.lookup(reader.handle, key).hits == 1, "the other engine's block is a hit");
  std::vector<uint32_t> loaded = b.prepare_load(reader.handle, key);
  if (loaded.size() == 1) {
    kvtier::slot_memory slots = b.slots();
    const unsigned char *bytes = static_cast<const unsigned char *>(slots.slot(loaded[0]));
    bool same = true;
    for (std::size_t i = 0; i < slots.slot_bytes; ++i) same = same && bytes[i] == 0x5A;
    expect(same, "the loaded slot holds the stored bytes");
    b.complete_load(reader.handle, key);
  } else {
    expect(false, "one slot to load");
  }
  b.request_finished(reader.handle);

  // Tiers, events and resets are the server's.
  expect(a.try_reset_cache().error().status == KVTIER_STATUS_UNSUPPORTED, "reset_cache is UNSUPPORTED");
  expect(a.try_wake_fd().error().status == KVTIER_STATUS_UNSUPPORTED, "wake_fd is UNSUPPORTED");
  // A local manager has no server.
  kvtier::manager local = kvtier::manager::from_json(R"({"primary": {"capacity": 4}})");
  expect(local.try_server_info().error().status == KVTIER_STATUS_NOT_FOUND, "a local manager has no server_info");

  if (failures) return 1;
  std::printf("server_connect: ok\n");
  return 0;
}
