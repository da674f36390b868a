// The matcher's steps in a number. Phases: 0 start, 1 after '-', 2 int "0", 3 int digits, 4 after
// '.', 5 fraction digits, 6 after 'e', 7 after the exponent sign, 8 exponent digits (2, 3, 5, 8 may
// end). A bounded integer takes a digit only while some value in its range can still come
// (IntegerReachable), and ends only in range (never "-0"); a bounded number likewise
// (NumberReachable, FractionReachable: exact, in units of 10^-16), without exponent.
#include "engine/structured/json_matcher.h"

namespace linfer::structured {
namespace {

bool IsDigit(uint8_t b) { return b >= '0' && b <= '9'; }

bool NumberMayEnd(uint8_t phase) { return phase == 2 || phase == 3 || phase == 5 || phase == 8; }

// A bounded integer node: whether a value in [n.min, n.max] is an integer whose first `digits`
// digits (none yet: 0) make `magnitude`, negative or not: the value itself (digits > 0) or one
// with j more digits, magnitude·10^j + [0, 10^j), up to kMaxIntegerDigits in all. Magnitudes stay
// below 10^kMaxIntegerDigits, so nothing overflows.
bool IntegerReachable(const Node& n, bool negative, int64_t magnitude, int digits) {
  auto hits = [&](int64_t a, int64_t b) {  // some magnitude in [a, b]
    const int64_t lo = negative ? -b : a, hi = negative ? -a : b;
    return lo <= n.max && hi >= n.min;
  };
  if (digits == 0) return hits(1, kMaxIntegerMagnitude);  // a first digit but '0' (its own case)
  int64_t scale = 1;
  for (; digits <= kMaxIntegerDigits; ++digits, scale *= 10) {
    if (hits(magnitude * scale, magnitude * scale + scale - 1)) return true;
  }
  return false;
}

// A bounded number (not an integer): whether units [a, b] of magnitude (negated when negative)
// meet its range.
bool UnitsMeet(const Node& n, bool negative, NumberUnits a, NumberUnits b) {
  const NumberUnits lo = negative ? -b : a, hi = negative ? -a : b;
  return lo <= n.max_units && hi >= n.min_units;
}

NumberUnits Pow10(int k) {
  NumberUnits p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

// A bounded number's integer part so far (`digits` digits making `magnitude`, the first not 0):
// whether a value in range can still come — the integer or one after it with a fraction, or one
// with j more integer digits and any fraction: [magnitude·10^j, (magnitude + 1)·10^j) in all.
bool NumberReachable(const Node& n, bool negative, int64_t magnitude, int digits) {
  NumberUnits scale = kUnitsPerOne;
  for (; digits <= kMaxIntegerDigits; ++digits, scale *= 10) {
    const NumberUnits a = NumberUnits{magnitude} * scale;
    if (UnitsMeet(n, negative, a, a + scale - 1)) return true;
  }
  return false;
}

// After the point, `digits` fraction digits (0: none yet) making `fraction`: whether a value in
// range can still come, [whole.fraction, whole.fraction + 10^-digits).
bool FractionReachable(const Node& n, bool negative, int64_t whole, int64_t fraction, int digits) {
  const NumberUnits step = Pow10(kMaxFractionDigits - digits);
  const NumberUnits a = NumberUnits{whole} * kUnitsPerOne + NumberUnits{fraction} * step;
  return UnitsMeet(n, negative, a, a + step - 1);
}

}  // namespace

bool JsonMatcher::NumberMayEndHere(const Frame& f) const {
  return NumberMayEnd(f.phase) && InBounds(f);
}

bool JsonMatcher::InBounds(const Frame& f) const {
  const Node& n = g_->nodes[f.node];
  if (!n.bounded) return true;
  if (n.integer) {
    const int64_t value = f.aux ? -f.v : f.v;
    return value >= n.min && value <= n.max;
  }
  NumberUnits u = NumberUnits{f.v} * kUnitsPerOne;
  if (f.phase == 5) u += NumberUnits{f.w} * Pow10(kMaxFractionDigits - f.a);
  if (f.aux) u = -u;
  return u >= n.min_units && u <= n.max_units;
}

// Numbers, bounded or not. A bounded one takes a byte only while a value within its bounds can
// still come of it (integers: IntegerReachable; numbers: NumberReachable / FractionReachable,
// without exponent); f.v the integer part, f.w the fraction's digits (f.a of them), f.aux 1 after
// a minus sign.
JsonMatcher::Step JsonMatcher::StepNumber(Frame& f, uint8_t b) {
  const Node& n = g_->nodes[f.node];
  const bool integer = n.integer, bounded = n.bounded, negative = f.aux != 0;
  auto whole = [&](int64_t magnitude, int digits) {  // the integer part so far may go on
    return !bounded || (integer ? IntegerReachable(n, negative, magnitude, digits)
                                : NumberReachable(n, negative, magnitude, digits));
  };
  auto exponent = [&] {
    if (integer || bounded || (b != 'e' && b != 'E')) return false;
    f.phase = 6;
    return true;
  };
  auto end = [&] {
    if (!InBounds(f)) return Step::kRefused;
    stack_.pop_back();
    return Step::kAgain;
  };
  switch (f.phase) {
    case 0:
    case 1:
      if (b == '-' && f.phase == 0) {
        if (bounded &&
            !(integer ? IntegerReachable(n, true, 0, 0) : UnitsMeet(n, true, 0, kMaxNumberUnits))) {
          return Step::kRefused;
        }
        f.phase = 1;
        f.aux = 1;
      } else if (b == '0') {  // an integer's 0 (never "-0" when bounded), or a number's 0.xxx
        if (bounded && (integer ? negative || 0 < n.min || 0 > n.max
                                : !UnitsMeet(n, negative, 0, kUnitsPerOne - 1))) {
          return Step::kRefused;
        }
        f.phase = 2;
      } else if (b >= '1' && b <= '9') {
        if (!whole(b - '0', 1)) return Step::kRefused;
        f.phase = 3;
        f.a = 1;
        f.v = b - '0';
      } else {
        return Step::kRefused;
      }
      return Step::kTaken;
    case 2:
    case 3:
      if (f.phase == 3 && IsDigit(b) && f.a < kMaxIntegerDigits) {
        const int64_t v = f.v * 10 + (b - '0');
        if (!whole(v, f.a + 1)) return Step::kRefused;
        ++f.a;
        f.v = v;
        return Step::kTaken;
      }
      if (!integer && b == '.') {
        if (bounded && !FractionReachable(n, negative, f.v, 0, 0)) return Step::kRefused;
        f.phase = 4;
        f.a = 0;
        f.w = 0;
        return Step::kTaken;
      }
      return exponent() ? Step::kTaken : end();
    case 4:
    case 5:
      if (IsDigit(b) && f.a < kMaxFractionDigits) {
        const int64_t w = f.w * 10 + (b - '0');
        if (bounded && !FractionReachable(n, negative, f.v, w, f.a + 1)) return Step::kRefused;
        f.phase = 5;
        ++f.a;
        f.w = w;
        return Step::kTaken;
      }
      if (f.phase == 4) return Step::kRefused;
      return exponent() ? Step::kTaken : end();
    case 6:
      if (b == '+' || b == '-') {
        f.phase = 7;
        return Step::kTaken;
      }
      [[fallthrough]];
    case 7:
      if (!IsDigit(b)) return Step::kRefused;
      f.phase = 8;
      f.a = 1;
      return Step::kTaken;
    case 8:
      if (IsDigit(b) && f.a < kMaxExponentDigits) {
        ++f.a;
        return Step::kTaken;
      }
      return end();
  }
  return Step::kRefused;
}

}  // namespace linfer::structured
