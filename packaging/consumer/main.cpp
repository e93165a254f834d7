// A minimal C++ consumer of the installed package: kvtier.hpp is installed
// beside kvtier.h and works with the same flags.
#include <cstdio>

#include "kvtier.hpp"

int main() {
  kvtier::manager m = kvtier::manager::from_json(R"({"primary": {"capacity": 8}})");
  kvtier_request_handle r = m.request_begin("r").handle;
  kvtier::lookup_answer a = m.lookup(r, kvtier::key_view("some-key"));
  if (a.hits != 0 || a.stop != kvtier::lookup_result::miss || a.reason != kvtier::miss_reason::absent) return 1;
  std::string text = m.metrics_prometheus();
  if (text.find("kvtier_manager_lookups_total 1\n") == std::string::npos) return 1;
  std::printf("consumer (C++): ok\n");
  return 0;
}
