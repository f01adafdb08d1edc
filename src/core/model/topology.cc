#include "core/model/topology.h"

#include <cctype>
#include <charconv>

#include "common/status.h"
#include "common/strings.h"

namespace tessera::core {

std::string LinkName(Link link) {
  switch (link.kind) {
    case LinkKind::kSelf:
      return "X";
    case LinkKind::kNvLink:
      return StrCat("NV", link.nvlink_lanes);
    case LinkKind::kPix:
      return "PIX";
    case LinkKind::kPxb:
      return "PXB";
    case LinkKind::kPhb:
      return "PHB";
    case LinkKind::kNode:
      return "NODE";
    case LinkKind::kSys:
      return "SYS";
  }
  return "?";
}

absl::StatusOr<Link> ParseLinkName(std::string_view text) {
  if (text == "X") return Link{LinkKind::kSelf, 0};
  if (text == "PIX") return Link{LinkKind::kPix, 0};
  if (text == "PXB") return Link{LinkKind::kPxb, 0};
  if (text == "PHB") return Link{LinkKind::kPhb, 0};
  if (text == "NODE") return Link{LinkKind::kNode, 0};
  if (text == "SYS") return Link{LinkKind::kSys, 0};
  if (text.size() > 2 && text.substr(0, 2) == "NV") {
    int lanes = 0;
    std::string_view digits = text.substr(2);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), lanes);
    if (ec == std::errc() && end == digits.data() + digits.size() && lanes > 0 && lanes <= 255) {
      return Link{LinkKind::kNvLink, static_cast<uint8_t>(lanes)};
    }
  }
  return absl::InvalidArgumentError(
      StrCat("unknown link \"", text, "\" (expected X, NV<lanes>, PIX, PXB, PHB, NODE or SYS)"));
}

NvLinkGeneration NvLinkGenerationForModel(std::string_view gpu_model) {
  std::string m(gpu_model);
  for (char& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (m.find("B200") != std::string::npos || m.find("GB200") != std::string::npos ||
      m.find("B100") != std::string::npos || m.find("GB300") != std::string::npos ||
      m.find("B300") != std::string::npos) {
    return NvLinkGeneration::kNv5;
  }
  if (m.find("H100") != std::string::npos || m.find("H200") != std::string::npos ||
      m.find("H800") != std::string::npos || m.find("GH200") != std::string::npos) {
    return NvLinkGeneration::kNv4;
  }
  if (m.find("V100") != std::string::npos) return NvLinkGeneration::kNv2;
  return NvLinkGeneration::kNv3;
}

int32_t LinkBandwidthGBps(Link link, NvLinkGeneration generation) {
  switch (link.kind) {
    case LinkKind::kSelf:
      return 1 << 20;
    case LinkKind::kNvLink:
      return link.nvlink_lanes * (generation == NvLinkGeneration::kNv5 ? 100 : 50);
    case LinkKind::kPix:
      return 64;
    case LinkKind::kPxb:
      return 48;
    case LinkKind::kPhb:
      return 40;
    case LinkKind::kNode:
      return 32;
    case LinkKind::kSys:
      return 20;
  }
  return 0;
}

LinkMatrix::LinkMatrix(int n, Link fill) : n_(n), links_(static_cast<size_t>(n) * n, fill) {
  for (int i = 0; i < n; ++i) links_[static_cast<size_t>(i) * n + i] = Link{LinkKind::kSelf, 0};
}

void LinkMatrix::Set(int i, int j, Link link) {
  TESSERA_CHECK(i >= 0 && i < n_ && j >= 0 && j < n_);
  links_[static_cast<size_t>(i) * n_ + j] = link;
  links_[static_cast<size_t>(j) * n_ + i] = link;
}

LinkMatrix LinkMatrix::AllNvLink(int n, int lanes) {
  LinkMatrix m(n, Link{LinkKind::kNvLink, static_cast<uint8_t>(lanes)});
  return m;
}

LinkMatrix LinkMatrix::Pcie(int n, int per_switch, int switches_per_socket) {
  LinkMatrix m(n, Link{LinkKind::kSys, 0});
  if (per_switch <= 0) per_switch = 1;
  if (switches_per_socket <= 0) switches_per_socket = 1;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      int si = i / per_switch, sj = j / per_switch;
      if (si == sj) {
        m.Set(i, j, Link{LinkKind::kPix, 0});
      } else if (si / switches_per_socket == sj / switches_per_socket) {
        m.Set(i, j, Link{LinkKind::kNode, 0});
      }
    }
  }
  return m;
}

}  // namespace tessera::core
