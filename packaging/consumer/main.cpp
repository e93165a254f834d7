// A minimal C++ consumer of the installed package: kvtier.hpp is installed
// beside kvtier.h and works with the same flags.
#include <cstdio>

#include "kvtier.hpp"

int main() {
  kvtier::manager m = kvtier::manager::from_json(R"({"primary": {"capacity": 8}})");
  m.on_new_request("r");
  if (m.lookup("r", "some-key") != kvtier::lookup_result::miss) return 1;
  std::string text = m.metrics_prometheus();
  if (text.find("kvtier_lookups_total{tier=\"manager\"} 1") == std::string::npos) return 1;
  std::printf("consumer (C++): ok\n");
  return 0;
}
