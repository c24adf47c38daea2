import Foundation
import HeraldModel
import HeraldTestSupport
import Testing

@Suite("JSON string literals")
struct EncodingTests {
    /// What jsonStringLiteral replaced: Foundation's writer, slashes left alone.
    static func foundation(_ value: String) -> String {
        String(
            decoding: try! JSONSerialization.data(
                withJSONObject: value, options: [.fragmentsAllowed, .withoutEscapingSlashes]),
            as: UTF8.self)
    }

    @Test(
        "byte for byte what JSONSerialization writes: every ASCII character, and 2,000 random strings of hard characters"
    )
    func sameAsFoundation() {
        for scalar in (0..<0x80).compactMap(Unicode.Scalar.init) {
            let text = "a\(Character(scalar))b"
            #expect(jsonStringLiteral(text) == Self.foundation(text), "U+\(String(scalar.value, radix: 16))")
        }
        let alphabet: [Character] = [
            "\"", "\\", "/", "\n", "\r", "\t", "\u{0}", "\u{1f}", "\u{7f}", "é", "\u{2028}", "\u{2029}", "😀", "<", "&",
            "a", " ",
        ]
        var rng = SeededGenerator(state: 20_261_123)
        for _ in 0..<2000 {
            let text = String(
                (0..<Int.random(in: 0...24, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! })
            #expect(jsonStringLiteral(text) == Self.foundation(text), "\(Array(text.unicodeScalars))")
            // And it reads back as the same string.
            let back =
                try? JSONSerialization.jsonObject(with: Data(jsonStringLiteral(text).utf8), options: .fragmentsAllowed)
                as? String
            #expect(back == text)
        }
    }
}
