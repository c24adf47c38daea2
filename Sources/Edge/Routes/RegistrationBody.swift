import Foundation
import HeraldModel
import HeraldProto

/// The body of `PUT api/register/{id}`. Property names match case-insensitively, as ASP.NET's
/// model binding did for the tutorial's clients.
package struct RegistrationBody: Equatable {
    var platform: Platform
    var handle: String
    var tags: [String]

    /// The body's three fields. The bodies clients send (strings, a list of strings) are read by
    /// ``FlatReader``, which builds no `[String: Any]`; anything else (a PushSubscription as an
    /// object, numbers, duplicate names, surrogate escapes, any error) by `JSONSerialization`,
    /// which decides and words the error. So both paths answer alike: a test and the fuzz
    /// target hold them to it.
    package static func parse(_ data: Data) throws -> RegistrationBody {
        guard let fields = FlatReader.read(data) else { return try parseWithFoundation(data) }
        return RegistrationBody(platform: try platform(fields.platform), handle: fields.handle, tags: fields.tags)
    }

    /// The whole body through `JSONSerialization`: the rule for every body.
    package static func parseWithFoundation(_ data: Data) throws -> RegistrationBody {
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw EdgeError(.badRequest, #"body must be a JSON object {"Platform": …, "Handle": …, "Tags": […]}"#)
        }
        let fields = Dictionary(object.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        guard let platformName = fields["platform"] as? String else {
            throw EdgeError(.badRequest, "Platform is required: one of apns, fcm (or gcm, fcmv1), wns, browser")
        }
        let handle: String
        switch fields["handle"] {
        case let text as String where !text.isEmpty: handle = text
        case let subscription as [String: Any]:
            // A browser may send its PushSubscription as an object rather than a JSON string.
            handle = String(
                decoding: try jsonData(subscription, options: [.sortedKeys]),
                as: UTF8.self)
        default: throw EdgeError(.badRequest, "Handle is required")
        }
        var tags: [String] = []
        switch fields["tags"] {
        case nil, is NSNull: break
        case let list as [Any]:
            tags = try list.map { item in
                guard let tag = item as? String else { throw EdgeError(.badRequest, "Tags must be a list of strings") }
                return tag
            }
        default: throw EdgeError(.badRequest, "Tags must be a list of strings")
        }
        return RegistrationBody(platform: try platform(platformName), handle: handle, tags: tags)
    }

    /// A platform name as the tutorial's clients send it (`field` names it in errors).
    static func platform(_ name: String, field: String = "Platform") throws -> Platform {
        switch name.lowercased() {
        case "apns": return .apns
        case "fcm", "gcm", "fcmv1": return .fcm
        case "wns": return .wns
        case "browser", "webpush": return .browser
        case "mpns":
            throw EdgeError(.badRequest, "\(field) mpns is retired (Microsoft ended MPNS); use wns")
        default:
            throw EdgeError(
                .badRequest,
                "unknown \(field) \"\(name.prefix(40))\"; accepted: apns, fcm (or gcm, fcmv1), wns, browser")
        }
    }
}

/// A reader of the registration body as clients send it: one JSON object whose members are
/// strings, `true`, `false`, `null` or a list of strings, with `Platform` and a non-empty
/// `Handle`. It answers nil for anything else, valid or not, and the caller reads that body with
/// `JSONSerialization` instead: this reader never decides that a body is wrong, only that it is
/// one of the plain ones. Bounded by the body (the edge's `max-body-bytes`): one pass, no
/// recursion, every index checked.
///
/// Why not a library: `JSONSerialization` builds a `[String: Any]` of boxed values and `as?`
/// casts them back, 37k of the PUT's 375k instructions in the edge (callgrind); `JSONDecoder`
/// counted more; no JSON library is among the packages this project builds on.
package enum FlatReader {
    package struct Fields: Equatable {
        var platform: String
        var handle: String
        var tags: [String]
    }

    package static func read(_ data: Data) -> Fields? {
        data.withUnsafeBytes { bytes in
            var reader = Cursor(bytes: bytes)
            return reader.object()
        }
    }

    private struct Cursor {
        let bytes: UnsafeRawBufferPointer
        var index = 0

        init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        var current: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipSpace() {
            while let byte = current, byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D { index += 1 }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard current == byte else { return false }
            index += 1
            return true
        }

        /// The whole body: `{`, members, `}`, nothing after but white space.
        mutating func object() -> Fields? {
            guard take(UInt8(ascii: "{")) else { return nil }
            var platform: String?
            var handle: String?
            var tags: [String]?
            var first = true
            while true {
                skipSpace()
                if current == UInt8(ascii: "}") {
                    index += 1
                    break
                }
                if !first { guard take(UInt8(ascii: ",")) else { return nil } }
                first = false
                guard take(UInt8(ascii: "\"")), let name = keyword(), take(UInt8(ascii: ":")) else { return nil }
                skipSpace()
                switch name {
                case .platform:
                    // A second spelling of a name: which one JSONSerialization keeps is its call.
                    guard platform == nil, take(UInt8(ascii: "\"")), let text = string() else { return nil }
                    platform = text
                case .handle:
                    guard handle == nil, take(UInt8(ascii: "\"")), let text = string(), !text.isEmpty else {
                        return nil
                    }
                    handle = text
                case .tags:
                    guard tags == nil, let list = stringsOrNull() else { return nil }
                    tags = list
                case .other:
                    guard scalar() else { return nil }
                }
            }
            skipSpace()
            guard index == bytes.count, let platform, let handle else { return nil }
            return Fields(platform: platform, handle: handle, tags: tags ?? [])
        }

        enum Name { case platform, handle, tags, other }

        /// A member's name after its opening quote, compared without case: ASCII without escapes
        /// only (a name in other letters may lower-case to one of the three; not worth reading).
        mutating func keyword() -> Name? {
            let start = index
            while let byte = current, byte != UInt8(ascii: "\"") {
                guard byte >= 0x20, byte < 0x80, byte != UInt8(ascii: "\\") else { return nil }
                index += 1
            }
            guard current != nil else { return nil }
            let name = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
            index += 1
            if Self.equalsIgnoringCase(name, "platform") { return .platform }
            if Self.equalsIgnoringCase(name, "handle") { return .handle }
            if Self.equalsIgnoringCase(name, "tags") { return .tags }
            return .other
        }

        static func equalsIgnoringCase(_ name: UnsafeRawBufferPointer, _ lower: StaticString) -> Bool {
            guard name.count == lower.utf8CodeUnitCount else { return false }
            return lower.withUTF8Buffer { expected in
                zip(name, expected).allSatisfy { byte, wanted in
                    (byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte) == wanted
                }
            }
        }

        /// A string's contents after its opening quote: escapes decoded, UTF-8 validated; nil for
        /// a control character, a surrogate escape or bytes that are not UTF-8.
        mutating func string() -> String? {
            let start = index
            // The common case: no escape, so the bytes are the string.
            while let byte = current, byte != UInt8(ascii: "\""), byte != UInt8(ascii: "\\") {
                guard byte >= 0x20 else { return nil }
                index += 1
            }
            guard let stop = current else { return nil }
            if stop == UInt8(ascii: "\"") {
                index += 1
                return validatedUTF8(UnsafeRawBufferPointer(rebasing: bytes[start..<(index - 1)]))
            }
            var text = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<index]))
            while let byte = current {
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    return text.withUnsafeBytes { validatedUTF8($0) }
                case UInt8(ascii: "\\"):
                    guard let escaped = current else { return nil }
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(escaped)
                    case UInt8(ascii: "b"): text.append(0x08)
                    case UInt8(ascii: "f"): text.append(0x0C)
                    case UInt8(ascii: "n"): text.append(0x0A)
                    case UInt8(ascii: "r"): text.append(0x0D)
                    case UInt8(ascii: "t"): text.append(0x09)
                    case UInt8(ascii: "u"):
                        guard let value = hex4(), let scalar = Unicode.Scalar(value) else { return nil }
                        text.append(contentsOf: String(Character(scalar)).utf8)
                    default: return nil
                    }
                default:
                    guard byte >= 0x20 else { return nil }
                    text.append(byte)
                }
            }
            return nil
        }

        /// Four hex digits (a `\u` escape's); a surrogate (a pair's half) is nil: left to
        /// `JSONSerialization`.
        mutating func hex4() -> UInt32? {
            var value: UInt32 = 0
            for _ in 0..<4 {
                guard let byte = current else { return nil }
                index += 1
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)  // trap-ok: a byte widened; four digits fit in 16 bits
            }
            return (0xD800...0xDFFF).contains(value) ? nil : value
        }

        /// `null` (no tags) or a list of strings.
        mutating func stringsOrNull() -> [String]? {
            if literal("null") { return [] }
            guard take(UInt8(ascii: "[")) else { return nil }
            var list: [String] = []
            skipSpace()
            if current == UInt8(ascii: "]") {
                index += 1
                return list
            }
            while true {
                guard take(UInt8(ascii: "\"")), let text = string() else { return nil }
                list.append(text)
                skipSpace()
                guard let byte = current else { return nil }
                index += 1
                if byte == UInt8(ascii: "]") { return list }
                guard byte == UInt8(ascii: ",") else { return nil }
            }
        }

        /// A member this reader does not keep: a string, `true`, `false` or `null`.
        mutating func scalar() -> Bool {
            if current == UInt8(ascii: "\"") {
                index += 1
                return string() != nil
            }
            return literal("true") || literal("false") || literal("null")
        }

        mutating func literal(_ word: StaticString) -> Bool {
            let end = index + word.utf8CodeUnitCount
            guard end <= bytes.count else { return false }
            let matches = word.withUTF8Buffer { expected in
                zip(UnsafeRawBufferPointer(rebasing: bytes[index..<end]), expected).allSatisfy { $0 == $1 }
            }
            if matches { index = end }
            return matches
        }
    }
}
