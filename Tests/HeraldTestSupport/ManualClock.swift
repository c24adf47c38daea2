import Synchronization

/// A clock tests move by hand.
public final class ManualClock: Sendable {
    public init() {}

    private let value = Mutex<Int64>(1_800_000_000_000)
    public var now: Int64 { value.withLock { $0 } }
    public func advance(seconds: Int64) { value.withLock { $0 += seconds * 1000 } }
    public var function: @Sendable () -> Int64 { { [self] in self.now } }
}
