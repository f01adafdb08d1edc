#include "agent/nri/nri_api.h"

#include "agent/nri/protowire.h"
#include "common/status.h"

namespace tessera::agent::nri {
namespace {

using protowire::Reader;
using protowire::Writer;

absl::Status ReadMapEntry(std::string_view data, std::map<std::string, std::string>* out) {
  Reader r(data);
  std::string key, value;
  while (r.Next()) {
    if (r.field() == 1) key = r.bytes();
    if (r.field() == 2) value = r.bytes();
  }
  if (!r.status().ok()) return r.status();
  (*out)[key] = value;
  return absl::OkStatus();
}

void WriteMap(Writer* w, int field, const std::map<std::string, std::string>& m) {
  for (const auto& [k, v] : m) w->MapEntry(field, k, v);
}

std::string EncodeMount(const Mount& m) {
  Writer w;
  w.String(1, m.destination);
  w.String(2, m.type);
  w.String(3, m.source);
  for (const std::string& o : m.options) w.Bytes(4, o);
  return w.Take();
}

std::string EncodeOptionalUint32(uint32_t v) {
  Writer w;
  w.Varint(1, v);
  return w.Take();
}

std::string EncodeDevice(const LinuxDevice& d) {
  Writer w;
  w.String(1, d.path);
  w.String(2, d.type);
  w.Int64(3, d.major);
  w.Int64(4, d.minor);
  if (d.file_mode) w.Bytes(5, EncodeOptionalUint32(*d.file_mode));
  if (d.uid) w.Bytes(6, EncodeOptionalUint32(*d.uid));
  if (d.gid) w.Bytes(7, EncodeOptionalUint32(*d.gid));
  return w.Take();
}

absl::StatusOr<uint32_t> DecodeOptionalUint32(std::string_view data) {
  Reader r(data);
  uint32_t v = 0;
  while (r.Next()) {
    if (r.field() == 1) v = static_cast<uint32_t>(r.varint());
  }
  if (!r.status().ok()) return r.status();
  return v;
}

}  // namespace

std::string EncodeRegisterPluginRequest(std::string_view name, std::string_view index,
                                        std::string_view nri_version) {
  Writer w;
  w.String(1, name);
  w.String(2, index);
  w.String(3, nri_version);
  return w.Take();
}

std::string EncodeConfigureResponse(int32_t events) {
  Writer w;
  w.Int32(2, events);
  return w.Take();
}

std::string EncodeSynchronizeResponse(bool more) {
  Writer w;
  w.Bool(2, more);
  return w.Take();
}

std::string EncodeContainerAdjustment(const ContainerAdjustment& a) {
  Writer w;
  WriteMap(&w, 2, a.annotations);
  for (const Mount& m : a.mounts) w.Bytes(3, EncodeMount(m));
  for (const auto& [k, v] : a.env) {
    Writer kv;
    kv.String(1, k);
    kv.String(2, v);
    w.Bytes(4, kv.data());
  }
  if (!a.devices.empty()) {
    Writer linux;
    for (const LinuxDevice& d : a.devices) linux.Bytes(1, EncodeDevice(d));
    w.Bytes(6, linux.data());
  }
  for (const std::string& name : a.cdi_devices) {
    Writer cdi;
    cdi.String(1, name);
    w.Bytes(8, cdi.data());
  }
  return w.Take();
}

std::string EncodeCreateContainerResponse(const ContainerAdjustment& adjust) {
  Writer w;
  if (!adjust.empty()) w.Bytes(1, EncodeContainerAdjustment(adjust));
  return w.Take();
}

absl::StatusOr<ConfigureRequest> DecodeConfigureRequest(std::string_view data) {
  ConfigureRequest c;
  Reader r(data);
  while (r.Next()) {
    switch (r.field()) {
      case 1:
        c.config = r.bytes();
        break;
      case 2:
        c.runtime_name = r.bytes();
        break;
      case 3:
        c.runtime_version = r.bytes();
        break;
      case 4:
        c.registration_timeout_ms = static_cast<int64_t>(r.varint());
        break;
      case 5:
        c.request_timeout_ms = static_cast<int64_t>(r.varint());
        break;
      case 6:
        c.nri_version = r.bytes();
        break;
      default:
        break;
    }
  }
  if (!r.status().ok()) return r.status();
  return c;
}

absl::StatusOr<PodSandbox> DecodePodSandbox(std::string_view data) {
  PodSandbox p;
  Reader r(data);
  while (r.Next()) {
    switch (r.field()) {
      case 1:
        p.id = r.bytes();
        break;
      case 2:
        p.name = r.bytes();
        break;
      case 3:
        p.uid = r.bytes();
        break;
      case 4:
        p.ns = r.bytes();
        break;
      case 5:
        TESSERA_RETURN_IF_ERROR(ReadMapEntry(r.bytes(), &p.labels));
        break;
      case 6:
        TESSERA_RETURN_IF_ERROR(ReadMapEntry(r.bytes(), &p.annotations));
        break;
      default:
        break;
    }
  }
  if (!r.status().ok()) return r.status();
  return p;
}

absl::StatusOr<Container> DecodeContainer(std::string_view data) {
  Container c;
  Reader r(data);
  while (r.Next()) {
    switch (r.field()) {
      case 1:
        c.id = r.bytes();
        break;
      case 2:
        c.pod_sandbox_id = r.bytes();
        break;
      case 3:
        c.name = r.bytes();
        break;
      case 4:
        c.state = static_cast<int>(r.varint());
        break;
      case 5:
        TESSERA_RETURN_IF_ERROR(ReadMapEntry(r.bytes(), &c.labels));
        break;
      case 6:
        TESSERA_RETURN_IF_ERROR(ReadMapEntry(r.bytes(), &c.annotations));
        break;
      case 8:
        c.env.emplace_back(r.bytes());
        break;
      default:
        break;
    }
  }
  if (!r.status().ok()) return r.status();
  return c;
}

absl::StatusOr<SynchronizeRequest> DecodeSynchronizeRequest(std::string_view data) {
  SynchronizeRequest s;
  Reader r(data);
  while (r.Next()) {
    if (r.field() == 1) {
      TESSERA_ASSIGN_OR_RETURN(PodSandbox p, DecodePodSandbox(r.bytes()));
      s.pods.push_back(std::move(p));
    } else if (r.field() == 2) {
      TESSERA_ASSIGN_OR_RETURN(Container c, DecodeContainer(r.bytes()));
      s.containers.push_back(std::move(c));
    } else if (r.field() == 3) {
      s.more = r.varint() != 0;
    }
  }
  if (!r.status().ok()) return r.status();
  return s;
}

absl::StatusOr<PodContainerRequest> DecodePodContainerRequest(std::string_view data,
                                                              bool state_change) {
  PodContainerRequest out;
  const int pod_field = state_change ? 2 : 1;
  const int container_field = state_change ? 3 : 2;
  Reader r(data);
  while (r.Next()) {
    if (r.field() == pod_field && r.type() == protowire::kLengthDelimited) {
      TESSERA_ASSIGN_OR_RETURN(out.pod, DecodePodSandbox(r.bytes()));
    } else if (r.field() == container_field && r.type() == protowire::kLengthDelimited) {
      TESSERA_ASSIGN_OR_RETURN(Container c, DecodeContainer(r.bytes()));
      out.container = std::move(c);
    }
  }
  if (!r.status().ok()) return r.status();
  return out;
}

absl::StatusOr<ContainerAdjustment> DecodeContainerAdjustment(std::string_view data) {
  ContainerAdjustment a;
  Reader r(data);
  while (r.Next()) {
    switch (r.field()) {
      case 2:
        TESSERA_RETURN_IF_ERROR(ReadMapEntry(r.bytes(), &a.annotations));
        break;
      case 3: {
        Mount m;
        Reader mr(r.bytes());
        while (mr.Next()) {
          if (mr.field() == 1) m.destination = mr.bytes();
          if (mr.field() == 2) m.type = mr.bytes();
          if (mr.field() == 3) m.source = mr.bytes();
          if (mr.field() == 4) m.options.emplace_back(mr.bytes());
        }
        if (!mr.status().ok()) return mr.status();
        a.mounts.push_back(std::move(m));
        break;
      }
      case 4: {
        Reader kv(r.bytes());
        std::string k, v;
        while (kv.Next()) {
          if (kv.field() == 1) k = kv.bytes();
          if (kv.field() == 2) v = kv.bytes();
        }
        if (!kv.status().ok()) return kv.status();
        a.env.emplace_back(std::move(k), std::move(v));
        break;
      }
      case 6: {
        Reader lr(r.bytes());
        while (lr.Next()) {
          if (lr.field() != 1) continue;
          LinuxDevice d;
          Reader dr(lr.bytes());
          while (dr.Next()) {
            switch (dr.field()) {
              case 1:
                d.path = dr.bytes();
                break;
              case 2:
                d.type = dr.bytes();
                break;
              case 3:
                d.major = static_cast<int64_t>(dr.varint());
                break;
              case 4:
                d.minor = static_cast<int64_t>(dr.varint());
                break;
              case 5: {
                TESSERA_ASSIGN_OR_RETURN(uint32_t v, DecodeOptionalUint32(dr.bytes()));
                d.file_mode = v;
                break;
              }
              case 6: {
                TESSERA_ASSIGN_OR_RETURN(uint32_t v, DecodeOptionalUint32(dr.bytes()));
                d.uid = v;
                break;
              }
              case 7: {
                TESSERA_ASSIGN_OR_RETURN(uint32_t v, DecodeOptionalUint32(dr.bytes()));
                d.gid = v;
                break;
              }
              default:
                break;
            }
          }
          if (!dr.status().ok()) return dr.status();
          a.devices.push_back(std::move(d));
        }
        if (!lr.status().ok()) return lr.status();
        break;
      }
      case 8: {
        Reader cr(r.bytes());
        std::string name;
        while (cr.Next()) {
          if (cr.field() == 1) name = cr.bytes();
        }
        if (!cr.status().ok()) return cr.status();
        a.cdi_devices.push_back(std::move(name));
        break;
      }
      default:
        break;
    }
  }
  if (!r.status().ok()) return r.status();
  return a;
}

std::string EncodePodSandbox(const PodSandbox& p) {
  Writer w;
  w.String(1, p.id);
  w.String(2, p.name);
  w.String(3, p.uid);
  w.String(4, p.ns);
  WriteMap(&w, 5, p.labels);
  WriteMap(&w, 6, p.annotations);
  return w.Take();
}

std::string EncodeContainer(const Container& c) {
  Writer w;
  w.String(1, c.id);
  w.String(2, c.pod_sandbox_id);
  w.String(3, c.name);
  w.Varint(4, static_cast<uint64_t>(c.state));
  WriteMap(&w, 5, c.labels);
  WriteMap(&w, 6, c.annotations);
  for (const std::string& e : c.env) w.Bytes(8, e);
  return w.Take();
}

std::string EncodeCreateContainerRequest(const PodSandbox& pod, const Container& container) {
  Writer w;
  w.Bytes(1, EncodePodSandbox(pod));
  w.Bytes(2, EncodeContainer(container));
  return w.Take();
}

std::string EncodeConfigureRequest(const ConfigureRequest& c) {
  Writer w;
  w.String(1, c.config);
  w.String(2, c.runtime_name);
  w.String(3, c.runtime_version);
  w.Int64(4, c.registration_timeout_ms);
  w.Int64(5, c.request_timeout_ms);
  w.String(6, c.nri_version);
  return w.Take();
}

std::string EncodeSynchronizeRequest(const SynchronizeRequest& s) {
  Writer w;
  for (const PodSandbox& p : s.pods) w.Bytes(1, EncodePodSandbox(p));
  for (const Container& c : s.containers) w.Bytes(2, EncodeContainer(c));
  w.Bool(3, s.more);
  return w.Take();
}

}  // namespace tessera::agent::nri
