import Foundation

/// Milliseconds since the Unix epoch, the one time unit Herald stores and sends.
public func unixMillis() -> Int64 {
    Int64(Date().timeIntervalSince1970 * 1000)
}

extension Duration {
    /// The duration in whole milliseconds, rounded down (deadlines on the wire, log fields).
    public var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// The duration in whole nanoseconds, rounded down (SwiftNIO timers).
    public var wholeNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}

/// Numbers from outside that mean time, each read by one bounded parse per unit, so the arithmetic
/// after them (`* 1000`, `now - t`) cannot overflow: a SAS token's `se`, `apns-expiration` (a send's
/// header or a template's), `X-WNS-TTL`, and dates NH's clients send. Every site that takes such a
/// number from a header, a query, a template or a stored row goes through here; the tests feed
/// each of them `Int64.min`, `Int64.max` and spellings that overflow.
public enum TimeValue {
    /// The latest instant Herald takes: 9999-12-31T23:59:59Z, the last a four-digit year names
    /// (NotificationHubs' `NHTime` reads no more). In milliseconds it is still far inside `Int64`.
    public static let maxUnixSeconds: Int64 = 253_402_300_799

    /// A UNIX time in seconds: ASCII digits only (no sign, no space, no exponent), at most
    /// ``maxUnixSeconds``. `nil` for anything else.
    public static func unixSeconds(_ text: some StringProtocol) -> Int64? {
        guard let value = digits(text), value <= maxUnixSeconds else { return nil }
        return value
    }

    /// A count of seconds from 1 to `max`, ASCII digits only; `nil` for anything else.
    public static func seconds(_ text: some StringProtocol, max: Int64) -> Int64? {
        guard let value = digits(text), value >= 1, value <= max else { return nil }
        return value
    }

    /// A date as UNIX seconds (rounded down); `nil` before 1970 or after ``maxUnixSeconds`` (and
    /// for a NaN), where `Int64(date.timeIntervalSince1970)` would trap.
    public static func unixSeconds(_ date: Date) -> Int64? {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard seconds >= 0, seconds <= Double(maxUnixSeconds) else { return nil }
        return Int64(seconds)
    }

    /// A date as UNIX milliseconds (rounded); `nil` where ``unixSeconds(_:)-swift.type.method`` is.
    public static func unixMillis(_ date: Date) -> Int64? {
        guard unixSeconds(date) != nil else { return nil }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    /// Seconds from `nowMillis` until `unixSeconds`, in `1...cap`: an expiry already past still
    /// gives the push its one try, and one further ahead than Herald keeps a push is the longest
    /// it keeps. Saturating: no operand makes it trap.
    public static func secondsUntil(unixSeconds: Int64, nowMillis: Int64, cap: Int64) -> Int64 {
        let (left, overflow) = unixSeconds.subtractingReportingOverflow(nowMillis / 1000)
        if overflow { return unixSeconds < 0 ? 1 : max(1, cap) }
        return min(max(1, left), max(1, cap))
    }

    /// ASCII digits, at most 19 of them and within `Int64`; a leading zero is allowed (`0` is a
    /// time). `nil` for anything else.
    static func digits(_ text: some StringProtocol) -> Int64? {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= 19,
            bytes.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") })
        else {
            return nil
        }
        return Int64(text)
    }
}

/// `unixMillis` as ISO 8601 in UTC: `2026-11-28T20:33:23.123Z`, or `2026-11-28T20:33:23Z` without
/// `fractional`. Exact: made from the integer milliseconds (a `Date` of them is a Double, and a
/// format style read .122 for .123 for about half of all instants), and cheap (no formatter made,
/// no `String(format:)`). Instants before 1970 read as 1970; after 9999, as 9999-12-31T23:59:59.999.
public func iso8601(unixMillis: Int64, fractional: Bool = true) -> String {
    let millis = max(0, min(unixMillis, TimeValue.maxUnixSeconds * 1000 + 999))
    var seconds = time_t(millis / 1000)
    var parts = tm()
    gmtime_r(&seconds, &parts)
    var bytes: [UInt8] = []
    bytes.reserveCapacity(24)
    func append(_ value: Int, digits: Int, then separator: UInt8?) {
        var divisor = 1
        for _ in 1..<digits { divisor *= 10 }
        var rest = value
        while divisor > 0 {
            bytes.append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest / divisor % 10))
            rest %= divisor
            divisor /= 10
        }
        if let separator { bytes.append(separator) }
    }
    append(Int(parts.tm_year) + 1900, digits: 4, then: UInt8(ascii: "-"))
    append(Int(parts.tm_mon) + 1, digits: 2, then: UInt8(ascii: "-"))
    append(Int(parts.tm_mday), digits: 2, then: UInt8(ascii: "T"))
    append(Int(parts.tm_hour), digits: 2, then: UInt8(ascii: ":"))
    append(Int(parts.tm_min), digits: 2, then: UInt8(ascii: ":"))
    append(Int(parts.tm_sec), digits: 2, then: fractional ? UInt8(ascii: ".") : nil)
    if fractional { append(Int(millis % 1000), digits: 3, then: nil) }
    bytes.append(UInt8(ascii: "Z"))
    return String(decoding: bytes, as: UTF8.self)
}
