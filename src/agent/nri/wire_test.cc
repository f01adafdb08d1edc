// ttrpc frames and NRI's multiplexer: encoding, reassembly from pieces, limits.
#include "agent/nri/mux.h"
#include "agent/nri/ttrpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

TEST(Ttrpc, FrameHeaderIsBigEndianLengthStreamTypeFlags) {
  const std::string f = ttrpc::EncodeFrame(0x01020304, ttrpc::kResponse, "abc", 0x01);
  ASSERT_EQ(f.size(), 13u);
  EXPECT_EQ(f.substr(0, 10), std::string("\x00\x00\x00\x03\x01\x02\x03\x04\x02\x01", 10));
  EXPECT_EQ(f.substr(10), "abc");
}

TEST(Ttrpc, FramesReassembleFromAnyPieces) {
  std::string stream = ttrpc::EncodeFrame(1, ttrpc::kRequest, std::string(5000, 'x')) +
                       ttrpc::EncodeFrame(3, ttrpc::kRequest, "") +
                       ttrpc::EncodeFrame(5, ttrpc::kResponse, "end");
  ttrpc::FrameDecoder d;
  std::vector<ttrpc::Frame> frames;
  for (size_t i = 0; i < stream.size(); i += 7) {
    d.Feed(std::string_view(stream).substr(i, 7));
    while (true) {
      auto f = d.Next();
      ASSERT_TRUE(f.ok());
      if (!f->has_value()) break;
      frames.push_back(**f);
    }
  }
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].data.size(), 5000u);
  EXPECT_EQ(frames[1].stream_id, 3u);
  EXPECT_EQ(frames[1].data, "");
  EXPECT_EQ(frames[2].type, ttrpc::kResponse);
  EXPECT_EQ(frames[2].data, "end");
}

TEST(Ttrpc, AnOversizedFrameIsAnError) {
  ttrpc::FrameDecoder d;
  d.Feed(std::string("\x00\x40\x00\x01\x00\x00\x00\x01\x01\x00", 10));  // 4 MiB + 1
  EXPECT_EQ(d.Next().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Ttrpc, RequestsAndResponsesRoundTrip) {
  ttrpc::Request r{"svc", "M", std::string("\x00\x01", 2), 123, {{"k", "v"}}};
  absl::StatusOr<ttrpc::Request> back = ttrpc::DecodeRequest(ttrpc::EncodeRequest(r));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->service, "svc");
  EXPECT_EQ(back->method, "M");
  EXPECT_EQ(back->payload, std::string("\x00\x01", 2));
  EXPECT_EQ(back->timeout_nano, 123);
  EXPECT_EQ(back->metadata, (std::vector<std::pair<std::string, std::string>>{{"k", "v"}}));

  // OK carries no status at all (what Go's client reads as success).
  EXPECT_EQ(ttrpc::EncodeResponse({ttrpc::kOk, "", ""}), "");
  absl::StatusOr<ttrpc::Response> error =
      ttrpc::DecodeResponse(ttrpc::EncodeResponse({ttrpc::kNotFound, "no such GPU", "p"}));
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->code, ttrpc::kNotFound);
  EXPECT_EQ(error->message, "no such GPU");
  EXPECT_EQ(error->payload, "p");
}

TEST(Mux, PayloadsAreCutAt4096BytesAndNeverMixMessages) {
  const std::string message(10'000, 'm');
  const std::string framed = nrimux::Encode(nrimux::kPluginServiceConn, message);
  EXPECT_EQ(framed.size(), message.size() + 3 * nrimux::kHeaderSize);
  EXPECT_EQ(framed.substr(0, 8), std::string("\x00\x00\x00\x01\x00\x00\x10\x00", 8));
  nrimux::Demux d;
  d.Feed(framed + nrimux::Encode(nrimux::kRuntimeServiceConn, "r"));
  std::vector<nrimux::Payload> payloads;
  while (true) {
    auto p = d.Next();
    ASSERT_TRUE(p.ok());
    if (!p->has_value()) break;
    payloads.push_back(**p);
  }
  ASSERT_EQ(payloads.size(), 4u);
  EXPECT_EQ(payloads[0].data.size(), 4096u);
  EXPECT_EQ(payloads[1].data.size(), 4096u);
  EXPECT_EQ(payloads[2].data.size(), 10'000u - 8192u);
  EXPECT_EQ(payloads[3].conn, nrimux::kRuntimeServiceConn);
  EXPECT_EQ(payloads[3].data, "r");
  // An empty write is one empty frame, as NRI's mux writes it.
  EXPECT_EQ(nrimux::Encode(2, "").size(), nrimux::kHeaderSize);
}

TEST(Mux, ConnectionZeroIsReserved) {
  nrimux::Demux d;
  d.Feed(std::string("\x00\x00\x00\x00\x00\x00\x00\x00", 8));
  EXPECT_FALSE(d.Next().ok());
}

}  // namespace
}  // namespace tessera::agent
