#include "http.h"

// The HTTP layer's parsing: a request's head and its framing (http.h).
#include <algorithm>
#include <cctype>
#include <cstring>

namespace attnscore::server::http {
namespace {

bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `text` with its %XX escapes decoded; false for a broken escape or a NUL.
bool PercentDecode(std::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return false;
      const int high = HexDigit(text[i + 1]), low = HexDigit(text[i + 2]);
      if (high < 0 || low < 0) return false;
      c = static_cast<char>(high * 16 + low);
      i += 2;
    }
    if (c == '\0') return false;
    out->push_back(c);
  }
  return true;
}

HeadParse Bad(int status, std::string error) {
  HeadParse parse;
  parse.result = HeadParse::Result::kBad;
  parse.status = status;
  parse.error = std::move(error);
  return parse;
}

}  // namespace

const std::string* Request::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return &value;
  }
  return nullptr;
}

size_t Request::HeaderCount(std::string_view name) const {
  return std::count_if(headers.begin(), headers.end(),
                       [&](const auto& header) { return header.first == name; });
}

bool Request::KeepAlive() const {
  // Connection holds a comma-separated list of options.
  bool close = false, keep_alive = false;
  for (const auto& [name, value] : headers) {
    if (name != "connection") continue;
    std::string_view list = value;
    while (!list.empty()) {
      const size_t comma = std::min(list.find(','), list.size());
      const std::string option = Lower(Trim(list.substr(0, comma)));
      close = close || option == "close";
      keep_alive = keep_alive || option == "keep-alive";
      list.remove_prefix(std::min(comma + 1, list.size()));
    }
  }
  return version == "HTTP/1.1" ? !close : keep_alive && !close;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";
  }
}

HeadParse ParseHead(std::string_view buffer, const Limits& limits, Request* request) {
  // Empty lines before a request line are skipped (RFC 9112 section 2.2).
  size_t start = 0;
  while (buffer.substr(start, 2) == "\r\n") start += 2;
  const size_t end = buffer.find("\r\n\r\n", start);
  if (end == std::string_view::npos || end + 4 > limits.max_head_bytes + start) {
    if (buffer.size() - start > limits.max_head_bytes) {
      return Bad(431, "the request's line and headers are over " +
                          std::to_string(limits.max_head_bytes) + " bytes");
    }
    return HeadParse();
  }
  std::string_view head = buffer.substr(start, end - start);
  const size_t line_end = std::min(head.find("\r\n"), head.size());
  const std::string_view line = head.substr(0, line_end);
  const size_t first = line.find(' '), last = line.rfind(' ');
  if (first == std::string_view::npos || first == last || first == 0) {
    return Bad(400, "malformed request line");
  }
  const std::string_view method = line.substr(0, first);
  const std::string_view target = line.substr(first + 1, last - first - 1);
  const std::string_view version = line.substr(last + 1);
  if (!std::all_of(method.begin(), method.end(), IsTokenChar) || target.empty() ||
      target.front() != '/' || target.find(' ') != std::string_view::npos) {
    return Bad(400, "malformed request line");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Bad(version.substr(0, 5) == "HTTP/" ? 505 : 400, "the request's version is '" +
                                                                std::string(version.substr(0, 20)) +
                                                                "'; want HTTP/1.1 or HTTP/1.0");
  }
  request->method = std::string(method);
  request->version = std::string(version);
  const size_t question = target.find('?');
  request->query =
      question == std::string_view::npos ? "" : std::string(target.substr(question + 1));
  if (!PercentDecode(target.substr(0, question), &request->path)) {
    return Bad(400, "the request's path has a broken %-escape or a NUL");
  }
  request->headers.clear();
  request->content_length = 0;
  std::string_view rest = head.substr(std::min(line_end + 2, head.size()));
  while (!rest.empty()) {
    const size_t next = std::min(rest.find("\r\n"), rest.size());
    const std::string_view field = rest.substr(0, next);
    rest.remove_prefix(std::min(next + 2, rest.size()));
    const size_t colon = field.find(':');
    // No space before the colon, no folded lines (RFC 9112 sections 5.1, 5.2).
    if (colon == std::string_view::npos || colon == 0 ||
        !std::all_of(field.begin(), field.begin() + colon, IsTokenChar)) {
      return Bad(400, "malformed header line");
    }
    const std::string_view value = Trim(field.substr(colon + 1));
    if (value.find_first_of(std::string_view("\0\r\n", 3)) != std::string_view::npos) {
      return Bad(400, "malformed header value");
    }
    request->headers.emplace_back(Lower(field.substr(0, colon)), std::string(value));
  }

  // HTTP/1.1 names its host once (RFC 9112 section 3.2).
  if (request->version == "HTTP/1.1" && request->HeaderCount("host") != 1) {
    return Bad(400, "the request has " + std::to_string(request->HeaderCount("host")) +
                        " Host headers; HTTP/1.1 needs one");
  }
  // Expect: 100-continue is the one expectation known (RFC 9110 10.1.1).
  HeadParse parse;
  if (const std::string* expect = request->Header("expect")) {
    if (Lower(*expect) != "100-continue") {
      return Bad(417,
                 "the request expects '" + expect->substr(0, 40) + "'; only 100-continue is known");
    }
    parse.continue_expected = request->version == "HTTP/1.1";
  }

  // The body's framing: exactly one Content-Length of digits, or none.
  if (request->Header("transfer-encoding") != nullptr) {
    return Bad(501, "Transfer-Encoding is not taken; send the body with a Content-Length");
  }
  const size_t lengths = request->HeaderCount("content-length");
  if (lengths > 1) {
    return Bad(400, "the request has " + std::to_string(lengths) +
                        " Content-Length headers; it must have one");
  }
  if (lengths == 1) {
    const std::string& value = *request->Header("content-length");
    if (value.empty() || value.size() > 18 ||
        value.find_first_not_of("0123456789") != std::string::npos) {
      return Bad(400, "the request's Content-Length is '" + value.substr(0, 40) +
                          "'; it must be a decimal number of bytes");
    }
    parse.body_bytes = std::stoll(value);
    request->content_length = parse.body_bytes;
  } else if (request->method == "POST" || request->method == "PUT") {
    return Bad(400, "the request has no Content-Length; a POST must give its body's length");
  }
  if (parse.body_bytes > limits.max_body_bytes) {
    return Bad(413, "the request body is over " + std::to_string(limits.max_body_bytes) +
                        " bytes (--max-request-bytes)");
  }
  parse.result = HeadParse::Result::kDone;
  parse.head_bytes = end + 4;
  return parse;
}

}  // namespace attnscore::server::http
