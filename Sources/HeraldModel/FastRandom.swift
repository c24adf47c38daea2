import Synchronization

/// Random numbers for ids that must be unique and evenly spread but need not be secret: trace and
/// span ids, request ids. SplitMix64 over one atomic counter, seeded once from the system's
/// generator. `SystemRandomNumberGenerator` is a `getrandom` system call per 8 bytes, which the
/// edge paid four times a request. Never 0, so no all-zero id can be drawn. Secrets
/// (keys, tokens, notification ids that must not be guessed) keep the system's generator.
public struct FastRandom: RandomNumberGenerator {
    private static let state = Atomic<UInt64>(UInt64.random(in: .min ... .max))

    public init() {}

    public mutating func next() -> UInt64 {
        var z = Self.state.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return max(z ^ (z >> 31), 1)
    }

    /// 64 random bits as 16 lower-case hex digits.
    public mutating func hex() -> String {
        let value = next()
        return String(unsafeUninitializedCapacity: 16) { out in
            writeLowerHex(value, digits: 16, to: out, at: 0)
            return 16
        }
    }
}
