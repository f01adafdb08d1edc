// Where a list page's time goes, per object, on each wire (issue 33 "decode once"): reads saved
// pages of a Pod or Node list (as the API server answers `GET /api/v1/pods?limit=500`, in JSON or
// in protobuf: curl with and without `Accept: application/vnd.kubernetes.protobuf`) and times,
// over `--rounds` rounds:
//   JSON page:     parse (ParseApiJson, managedFields dropped), decode (DecodePod / DecodeNode
//                  of each item);
//   protobuf page: parse (libprotobuf's parse of the list message alone), to_json
//                  (ProtobufListToJson: that parse and the JSON shape), decode (DecodePod /
//                  DecodeNode of that JSON), and, decoded once, read_in_place (ReadProtobufList:
//                  the page checked as libprotobuf would parse it) and decode_in_place (DecodePod /
//                  DecodeNode of each item read in place: no message, no tree).
// Prints one JSON line per page: microseconds per object for each stage.
//
//   list_decode_bench PAGE... [--rounds 20]
#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "k8s/client/protobuf_value.h"
#include "k8s/client/protobuf_wire.h"
#include "k8s/client/watch.h"
#include "k8s/scheduler/objects.h"
#include "k8s_core.pb.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Decodes every item of `page` (a list as JSON) as pods or nodes; the number of items.
size_t DecodeItems(const json& page, bool pods) {
  size_t n = 0;
  for (const json& item : page.at("items")) {
    if (pods) {
      n += tessera::k8s::DecodePod(item) != nullptr ? 1 : 0;
    } else {
      n += tessera::k8s::DecodeNode(item) != nullptr ? 1 : 0;
    }
  }
  return n;
}

int Page(const std::string& path, int rounds) {
  const std::string body = ReadFile(path);
  const bool protobuf = tessera::k8s::IsProtobufEnvelope(body);
  double parse_us = 0, to_json_us = 0, decode_us = 0, read_in_place_us = 0, decode_in_place_us = 0;
  size_t items = 0;
  bool pods = false;
  for (int r = 0; r < rounds; ++r) {
    json page;
    if (protobuf) {
      tessera::k8s::wire::Unknown unknown;
      auto t0 = Clock::now();
      if (!unknown.ParseFromArray(body.data() + 4, static_cast<int>(body.size() - 4))) return 1;
      pods = unknown.typemeta().kind() == "PodList";
      if (pods) {
        tessera::k8s::wire::PodList list;
        if (!list.ParseFromString(unknown.raw())) return 1;
      } else {
        tessera::k8s::wire::NodeList list;
        if (!list.ParseFromString(unknown.raw())) return 1;
      }
      auto t1 = Clock::now();
      absl::StatusOr<json> j = tessera::k8s::ProtobufListToJson(body);
      auto t2 = Clock::now();
      if (!j.ok()) {
        std::cerr << path << ": " << j.status() << "\n";
        return 1;
      }
      parse_us += Micros(t1 - t0);
      to_json_us += Micros(t2 - t1);
      page = std::move(*j);
      auto body_copy = std::make_shared<const std::string>(body);
      auto t3 = Clock::now();
      absl::StatusOr<tessera::k8s::ProtobufList> list =
          tessera::k8s::ReadProtobufList(std::move(body_copy));
      auto t4 = Clock::now();
      if (!list.ok()) {
        std::cerr << path << ": " << list.status() << "\n";
        return 1;
      }
      for (const tessera::k8s::ProtobufValue& item : list->items) {
        if (pods) {
          (void)tessera::k8s::DecodePod(item);
        } else {
          (void)tessera::k8s::DecodeNode(item);
        }
      }
      auto t5 = Clock::now();
      read_in_place_us += Micros(t4 - t3);
      decode_in_place_us += Micros(t5 - t4);
    } else {
      auto t0 = Clock::now();
      absl::StatusOr<json> j = tessera::k8s::ParseApiJson(body, true);
      auto t1 = Clock::now();
      if (!j.ok()) {
        std::cerr << path << ": " << j.status() << "\n";
        return 1;
      }
      parse_us += Micros(t1 - t0);
      page = std::move(*j);
      pods = page.value("kind", "") == "PodList";
    }
    auto d0 = Clock::now();
    items = DecodeItems(page, pods);
    decode_us += Micros(Clock::now() - d0);
  }
  const double n = static_cast<double>(items) * rounds;
  json out = {{"page", path},
              {"wire", protobuf ? "protobuf" : "json"},
              {"kind", pods ? "PodList" : "NodeList"},
              {"bytes", body.size()},
              {"items", items},
              {"parse_us", parse_us / n},
              {"decode_us", decode_us / n}};
  if (protobuf) {
    out["to_json_us"] = to_json_us / n;
    out["read_in_place_us"] = read_in_place_us / n;
    out["decode_in_place_us"] = decode_in_place_us / n;
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 20;
  std::vector<std::string> pages;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::stoi(argv[++i]);
    } else {
      pages.push_back(a);
    }
  }
  if (pages.empty()) {
    std::cerr << "usage: list_decode_bench PAGE... [--rounds N]\n";
    return 2;
  }
  for (const std::string& p : pages) {
    if (int rc = Page(p, rounds); rc != 0) return rc;
  }
  return 0;
}
