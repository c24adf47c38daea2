import Foundation

/// The lower-case hex digit of `value`'s low four bits: ids (request, trace, span and message ids)
/// and `\u00XX` escapes written byte by byte on hot paths, without a table or a formatter.
@inlinable public func lowerHexDigit(_ value: UInt64) -> UInt8 {
    let nibble = UInt8(truncatingIfNeeded: value & 0xF)
    return nibble < 10 ? UInt8(ascii: "0") &+ nibble : UInt8(ascii: "a") &+ (nibble &- 10)
}

/// `value`'s last `digits` hex digits, lower-case, written at `out[at..<at + digits]` (the caller
/// sized `out`): ids written into a string's buffer without a formatter.
@inlinable public func writeLowerHex(
    _ value: UInt64, digits: Int, to out: UnsafeMutableBufferPointer<UInt8>, at: Int
) {
    var value = value
    var index = at &+ digits
    while index > at {
        index &-= 1
        out[index] = lowerHexDigit(value)
        value >>= 4
    }
}

/// `bytes` as a string when they are UTF-8, else nil. ASCII, the common case (ids, tokens, names,
/// `traceparent`), is valid UTF-8 as it is and decoded directly: `String(validating:as:)` runs
/// unspecialised in the standard library, about 650 instructions of generic metadata look-ups a
/// call (callgrind), on paths that read several strings per request.
public func validatedUTF8(_ bytes: UnsafeRawBufferPointer) -> String? {
    if isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
    return String(validating: bytes, as: UTF8.self)
}

/// No byte with its high bit set, eight at a time.
public func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
    var at = 0
    while at &+ 8 <= bytes.count {
        guard bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self) & 0x8080_8080_8080_8080 == 0 else {
            return false
        }
        at &+= 8
    }
    while at < bytes.count {
        guard bytes[at] < 0x80 else { return false }
        at &+= 1
    }
    return true
}

/// `value` as a JSON string literal, quotes included, for splicing into JSON built as text (the
/// edge's native payloads, FCM's message envelope). Slashes are left alone.
///
/// Escapes what RFC 8259 §7 requires (`"`, `\`, U+0000–U+001F), the same bytes JSONSerialization
/// writes (a test checks them against it), without its cost: a writer, a bridged NSString and
/// dynamic casts per call, on paths that build JSON for every request.
public func jsonStringLiteral(_ value: String) -> String {
    let utf8 = value.utf8
    // The common case: nothing to escape. Read from the string's own buffer: a generic walk of
    // the UTF-8 view costs about ten times as much a byte, 10k instructions of an NH PUT.
    func needsEscaping(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        for byte in bytes where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
            return true
        }
        return false
    }
    let escapes =
        utf8.withContiguousStorageIfAvailable(needsEscaping)
        ?? utf8.contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
    if !escapes {
        return "\"" + value + "\""
    }
    var out: [UInt8] = [UInt8(ascii: "\"")]
    out.reserveCapacity(utf8.count + 16)
    for byte in utf8 {
        switch byte {
        case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
        case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
        case 0x08: out += [UInt8(ascii: "\\"), UInt8(ascii: "b")]
        case 0x0C: out += [UInt8(ascii: "\\"), UInt8(ascii: "f")]
        case 0x0A: out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
        case 0x0D: out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
        case 0x09: out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
        case 0..<0x20: out += Array("\\u00".utf8) + [lowerHexDigit(UInt64(byte >> 4)), lowerHexDigit(UInt64(byte))]
        default: out.append(byte)
        }
    }
    out.append(UInt8(ascii: "\""))
    return String(decoding: out, as: UTF8.self)
}

/// URL-safe base64 without padding (RFC 4648 §5), as Web Push and JOSE use it.
public enum Base64URL {
    public static func encode(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
            of: "/", with: "_"
        )
        .replacingOccurrences(of: "=", with: "")
    }

    public static func decode(_ text: String) -> [UInt8]? {
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        standard = standard.trimmingCharacters(in: CharacterSet(charactersIn: "="))
        standard += String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4)
        return Data(base64Encoded: standard).map { [UInt8]($0) }
    }
}

/// `value` with XML's special characters escaped (`"` and `'` too unless `quotes` is false: text
/// nodes may keep them), and characters XML 1.0 cannot carry (C0 controls other than tab, newline,
/// return; U+FFFE, U+FFFF) dropped, so the result is always well-formed. The edge's WNS payloads and
/// NH's XML, and rendered XML templates, use it.
public func xmlEscaped(_ value: String, quotes: Bool = true) -> String {
    var out = ""
    out.reserveCapacity(value.utf8.count)
    for scalar in value.unicodeScalars {
        switch scalar {
        case "&": out += "&amp;"
        case "<": out += "&lt;"
        case ">": out += "&gt;"
        case "\"" where quotes: out += "&quot;"
        case "'" where quotes: out += "&apos;"
        case "\t", "\n", "\r": out.unicodeScalars.append(scalar)
        default:
            if scalar.value >= 0x20, scalar.value != 0xFFFE, scalar.value != 0xFFFF {
                out.unicodeScalars.append(scalar)
            }
        }
    }
    return out
}
