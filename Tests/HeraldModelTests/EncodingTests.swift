import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import Testing

@Suite("JSON string literals", .watchedForStalls)
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

@Suite("JSON objects written a member at a time", .watchedForStalls)
struct JSONObjectWriterTests {
    static func encoder(_ value: some Encodable) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Array(try encoder.encode(value))
    }

    @Test("an inbox entry: byte for byte what JSONEncoder writes with sorted keys, hard strings included")
    func inboxEntry() throws {
        var rng = SeededGenerator(state: 20_261_129)
        let alphabet: [Character] = ["\"", "\\", "/", "\n", "\t", "\u{1}", "é", "😀", "a", " ", "{", ":"]
        func text() -> String {
            String((0..<Int.random(in: 0...12, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! })
        }
        for round in 0..<200 {
            var headers: [Header] = []
            for _ in 0..<Int.random(in: 0...3, using: &rng) { headers.append(Header(name: text(), value: text())) }
            let entry = InboxEntry(
                sequence: Int64(round), notificationID: text(), registrationID: text(), platform: .apns,
                handle: text(), headers: headers, payload: Array(text().utf8),
                recordedAtUnixMs: Int64(round) * 1_000_003)
            let json = InboxEntryJSON(entry)
            #expect(json.sortedJSON == (try Self.encoder(json)), "\(entry)")
        }
        #expect(JSONObjectWriter().finished == Array("{}".utf8))
    }

    @Test("UTF-8 read from bytes: ASCII directly, the rest validated, as String(validating:) does")
    func validatedUTF8Strings() {
        var inputs: [[UInt8]] = [
            [], Array("a".utf8), Array("abcdefgh".utf8), Array("00-4bf92f3577b34da6a3ce929d0e0e4736-01".utf8),
            Array("café".utf8), Array("abcdefghijklmnop✓".utf8), [0xff], Array("abcdefgh".utf8) + [0xc3],
            [0xed, 0xa0, 0x80], Array("abcdefghijklmnop".utf8) + [0xe2, 0x9c],
        ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            inputs.append(
                (0..<Int.random(in: 0...40, using: &generator)).map { _ in
                    Bool.random(using: &generator)
                        ? UInt8.random(in: 0x20...0x7e, using: &generator)
                        : UInt8.random(in: 0...255, using: &generator)
                })
        }
        for input in inputs {
            let ours = input.withUnsafeBytes { validatedUTF8($0) }
            #expect(ours == String(validating: input, as: UTF8.self), "\(input)")
            #expect(input.withUnsafeBytes { isASCII($0) } == input.allSatisfy { $0 < 0x80 }, "\(input)")
        }
    }
}
