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
