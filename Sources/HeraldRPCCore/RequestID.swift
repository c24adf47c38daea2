import HeraldModel

/// Metadata key of the request id propagated across services.
package let requestIDKey = "x-request-id"

/// A fresh request id: 16 hex characters, unique, not secret (``FastRandom``: no system call).
public func newRequestID() -> String {
    var random = FastRandom()
    return random.hex()
}

/// `words` × 64 random bits as lower-case hex, 16 characters a word (ids that must not be guessed).
public func randomHex(words: Int) -> String {
    var generator = SystemRandomNumberGenerator()
    return (0..<words).map { _ in
        let hex = String(generator.next() as UInt64, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }.joined()
}
