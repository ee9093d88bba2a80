// libFuzzer target: the server's HTTP layer parsing a request's head
// (server/http.h, ParseHead) from arbitrary bytes. A parse is incomplete,
// done or refused, never a crash or an overread; done means a method, a
// path from "/", and a body length within the limit, and parsing the head
// alone gives the same; refused means a status the layer documents and a
// reason.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "http.h"

namespace {

using attnscore::server::http::HeadParse;
using attnscore::server::http::Limits;
using attnscore::server::http::ParseHead;
using attnscore::server::http::Request;

void Require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Limits limits;
  limits.max_head_bytes = 2048;
  limits.max_body_bytes = 1 << 20;
  const std::string_view buffer(reinterpret_cast<const char*>(data), size);
  Request request;
  const HeadParse parse = ParseHead(buffer, limits, &request);
  switch (parse.result) {
    case HeadParse::Result::kIncomplete:
      Require(parse.head_bytes == 0);
      break;
    case HeadParse::Result::kDone: {
      Require(parse.head_bytes <= size);
      Require(parse.body_bytes >= 0 && parse.body_bytes <= limits.max_body_bytes);
      Require(!request.method.empty() && !request.path.empty() && request.path[0] == '/');
      Require(request.version == "HTTP/1.1" || request.version == "HTTP/1.0");
      Request again;
      const HeadParse head_alone = ParseHead(buffer.substr(0, parse.head_bytes), limits, &again);
      Require(head_alone.result == HeadParse::Result::kDone &&
              head_alone.head_bytes == parse.head_bytes && again.path == request.path &&
              again.headers == request.headers);
      break;
    }
    case HeadParse::Result::kBad:
      Require(parse.status == 400 || parse.status == 413 || parse.status == 417 ||
              parse.status == 431 || parse.status == 501 || parse.status == 505);
      Require(!parse.error.empty());
      break;
  }
  return 0;
}
