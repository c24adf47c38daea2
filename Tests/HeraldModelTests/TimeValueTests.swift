import Foundation
import HeraldModel
import HeraldTestSupport
import Testing

/// Numbers from outside that mean time: one bounded parse per unit, and saturating
/// arithmetic after it, fed the extremes and the spellings that overflow.
@Suite("hardening: time values", .watchedForStalls)
struct TimeValueTests {
    static let hostile = [
        "-9223372036854775808", "9223372036854775807", "9223372036854775808", "99999999999999999999", "-1", "+1", " 1",
        "1 ",
        "1e3", "0x10", "", "１２", "253402300800", "1.5",
    ]

    @Test("UNIX seconds: digits only, 0 through 9999-12-31T23:59:59Z")
    func unixSeconds() {
        #expect(TimeValue.unixSeconds("0") == 0)
        #expect(TimeValue.unixSeconds("1700000000") == 1_700_000_000)
        #expect(TimeValue.unixSeconds("253402300799") == TimeValue.maxUnixSeconds)
        for text in Self.hostile { #expect(TimeValue.unixSeconds(text) == nil, "\(text)") }
    }

    @Test("a count of seconds: 1 through its limit")
    func seconds() {
        #expect(TimeValue.seconds("60", max: 3600) == 60)
        #expect(TimeValue.seconds("3600", max: 3600) == 3600)
        for text in Self.hostile + ["0", "3601"] { #expect(TimeValue.seconds(text, max: 3600) == nil, "\(text)") }
    }

    @Test("dates outside 1970 to 9999 and NaN are refused where Int64(timeIntervalSince1970) would trap")
    func dates() {
        #expect(TimeValue.unixSeconds(Date(timeIntervalSince1970: 1_700_000_000.9)) == 1_700_000_000)
        #expect(TimeValue.unixMillis(Date(timeIntervalSince1970: 1_700_000_000.25)) == 1_700_000_000_250)
        for seconds in [-1, 253_402_300_800, 1e300, -1e300, .infinity, -.infinity, .nan] as [Double] {
            #expect(TimeValue.unixSeconds(Date(timeIntervalSince1970: seconds)) == nil, "\(seconds)")
            #expect(TimeValue.unixMillis(Date(timeIntervalSince1970: seconds)) == nil, "\(seconds)")
        }
    }

    @Test("seconds until an expiry: at least 1, at most the cap, for any operands")
    func secondsUntil() {
        #expect(TimeValue.secondsUntil(unixSeconds: 1_060, nowMillis: 1_000_000, cap: 3600) == 60)
        #expect(TimeValue.secondsUntil(unixSeconds: 10, nowMillis: 1_000_000, cap: 3600) == 1)
        #expect(TimeValue.secondsUntil(unixSeconds: TimeValue.maxUnixSeconds, nowMillis: 0, cap: 3600) == 3600)
        for (seconds, now) in [
            (Int64.max, Int64.min), (Int64.min, Int64.max), (Int64.max, Int64.max), (Int64.min, Int64.min),
            (0, Int64.min),
        ] {
            let left = TimeValue.secondsUntil(unixSeconds: seconds, nowMillis: now, cap: 3600)
            #expect((1...3600).contains(left), "\(seconds) at \(now): \(left)")
        }
    }
}

@Suite("ISO 8601 from Unix milliseconds", .watchedForStalls)
struct ISO8601Tests {
    @Test("every millisecond of a second reads as itself; with and without fractions; clamped at the ends")
    func exact() {
        let second: Int64 = 1_795_898_003_000
        for offset in Int64(0)..<1000 {
            #expect(
                iso8601(unixMillis: second + offset) == "2026-11-28T20:33:23.\(String(format: "%03d", Int(offset)))Z")
        }
        #expect(iso8601(unixMillis: second + 999, fractional: false) == "2026-11-28T20:33:23Z")
        #expect(iso8601(unixMillis: 0) == "1970-01-01T00:00:00.000Z")
        #expect(iso8601(unixMillis: -5) == "1970-01-01T00:00:00.000Z")
        #expect(iso8601(unixMillis: .max) == "9999-12-31T23:59:59.999Z")
        // The seconds agree with Foundation's own formatter across the years.
        let formatter = ISO8601DateFormatter()
        for seconds in stride(from: Int64(0), to: TimeValue.maxUnixSeconds, by: 86_399_997) {
            #expect(
                iso8601(unixMillis: seconds * 1000, fractional: false)
                    == formatter.string(from: Date(timeIntervalSince1970: Double(seconds))))
        }
    }
}
