import Foundation
import HeraldModel

/// The message ids of one send's deliveries: version-4 UUIDs from 122 random bits drawn once per
/// send, the low word XOR-ed with the delivery's index. Unique within the send by construction and
/// across sends by the random bits, at a fraction of the cost of a `UUID()` (system random bytes
/// and formatting) per device of a large fan-out.
struct MessageIDs {
    private let high: UInt64
    private let low: UInt64

    init() {
        var generator = SystemRandomNumberGenerator()
        // Version 4 in the high word; the variant (10) in the top bits of the low word.
        high = (generator.next() & ~0xF000) | 0x4000
        low = (generator.next() & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
    }

    func id(_ index: Int) -> String {
        let low = self.low ^ UInt64(index & 0x3FFF_FFFF_FFFF_FFFF)
        var out = [UInt8]()
        out.reserveCapacity(36)
        // 32 hex digits, high word first, grouped 8-4-4-4-12.
        for position in 0..<32 {
            if position == 8 || position == 12 || position == 16 || position == 20 { out.append(UInt8(ascii: "-")) }
            let word = position < 16 ? high : low
            out.append(lowerHexDigit(word >> UInt64(60 - 4 * (position % 16))))
        }
        return String(decoding: out, as: UTF8.self)
    }
}
