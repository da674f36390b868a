// The formats' regular expressions, built from RFC 3339's and RFC 4291's grammars.
#include "engine/structured/string_formats.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace linfer::structured {
namespace {

std::string Date() {
  const std::string year = R"((\d{3}[1-9]|\d{2}[1-9]\d|\d[1-9]\d{2}|[1-9]\d{3}))";
  // Divisible by 4 and not by 100, or by 400 (not 0000).
  const std::string leap =
      R"((\d{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00))";
  return absl::StrCat("(", year, R"(-(0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|)", year,
                      R"(-(0[469]|11)-(0[1-9]|[12]\d|30)|)", year, R"(-02-(0[1-9]|1\d|2[0-8])|)",
                      leap, "-02-29)");
}

std::string Time() {
  return R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
}

std::string Label() { return "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"; }

std::string Ipv4() {
  const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  return absl::StrCat(octet, R"((\.)", octet, "){3}");
}

std::string Ipv6() {
  const std::string h = "[0-9a-fA-F]{1,4}";
  const std::string ls32 = absl::StrCat("(", h, ":", h, "|", Ipv4(), ")");
  auto heads = [&](int n) {  // up to n+1 groups before "::" (n < 0: none)
    return n < 0 ? std::string() : absl::StrCat("((", h, ":){0,", n, "}", h, ")?");
  };
  return absl::StrCat("((", h, ":){6}", ls32,                  //
                      "|::(", h, ":){5}", ls32,                //
                      "|", heads(0), "::(", h, ":){4}", ls32,  //
                      "|", heads(1), "::(", h, ":){3}", ls32,  //
                      "|", heads(2), "::(", h, ":){2}", ls32,  //
                      "|", heads(3), "::", h, ":", ls32,       //
                      "|", heads(4), "::", ls32,               //
                      "|", heads(5), "::", h,                  //
                      "|", heads(6), "::)");
}

}  // namespace

StringFormat FormatOf(absl::string_view format) {
  static const std::string* date = new std::string(Date());
  static const std::string* time = new std::string(Time());
  static const std::string* date_time = new std::string(absl::StrCat(Date(), "T", Time()));
  static const std::string* duration = [] {
    const std::string t = R"(T(\d+H(\d+M(\d+S)?)?|\d+M(\d+S)?|\d+S))";
    return new std::string(
        absl::StrCat(R"(P((\d+Y(\d+M(\d+D)?)?|\d+M(\d+D)?|\d+D)()", t, ")?|", t, R"(|\d+W))"));
  }();
  static const std::string* email = new std::string(
      absl::StrCat(R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)",
                   Label(), R"((\.)", Label(), ")+"));
  static const std::string* hostname =
      new std::string(absl::StrCat(Label(), R"((\.)", Label(), ")*"));
  static const std::string* ipv4 = new std::string(Ipv4());
  static const std::string* ipv6 = new std::string(Ipv6());
  static const char* uuid =
      "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  if (format == "date") return {date->c_str()};
  if (format == "time") return {time->c_str()};
  if (format == "date-time") return {date_time->c_str()};
  if (format == "duration") return {duration->c_str()};
  if (format == "email") return {email->c_str(), 254};
  if (format == "hostname") return {hostname->c_str(), 253};
  if (format == "ipv4") return {ipv4->c_str()};
  if (format == "ipv6") return {ipv6->c_str()};
  if (format == "uuid") return {uuid};
  return {nullptr};
}

}  // namespace linfer::structured
