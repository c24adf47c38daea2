import Foundation
import HeraldModel

/// A bounded reader of the XML that NH's clients send: elements with attributes, text with the five
/// named and the numeric character references, CDATA sections, comments and processing
/// instructions (skipped), in UTF-8. No DTD, so no entity of a caller's can be expanded.
///
/// Written here rather than taken from FoundationXML, whose XMLParser crashes the process on Linux
/// for inputs fuzzing found in seconds (see ``NHRegistrationXML``). It is linear in the input: every
/// byte is looked at a bounded number of times, and it stops at `maxElements` elements and
/// `maxDepth` levels.
package enum XMLSubset {
    package enum Event {
        case start(String, [(name: String, value: String)])
        case text(String)
        case end(String)
    }

    package struct Failure: Error {
        var message: String
    }

    package static func parse(
        _ bytes: [UInt8], maxElements: Int, maxDepth: Int, _ handle: (Event) throws -> Void
    ) throws {
        guard bytes.withUnsafeBytes({ validatedUTF8($0) }) != nil else {
            throw Failure(message: "the body is not UTF-8")
        }
        // XML 1.0's characters: no control character but tab, line feed and carriage return.
        guard !bytes.contains(where: { $0 < 0x20 && !isSpace($0) }) else {
            throw Failure(message: "a control character (XML allows only tab, LF and CR)")
        }
        var reader = Cursor(bytes: bytes)
        var open: [String] = []
        var elements = 0
        var rootClosed = false
        while !reader.atEnd {
            if reader.peek == UInt8(ascii: "<") {
                if reader.starts(with: "<?") {
                    reader.index += 2
                    let body = try reader.skip(past: "?>", what: "a processing instruction")
                    if body.starts(with: Array("xml".utf8)), let encoding = declaredEncoding(body),
                        !["utf-8", "utf8"].contains(encoding.lowercased())
                    {
                        throw Failure(message: "the body is UTF-8, not \(encoding.prefix(40))")
                    }
                } else if reader.starts(with: "<!--") {
                    _ = try reader.skip(past: "-->", what: "a comment")
                } else if reader.starts(with: "<![CDATA[") {
                    guard !open.isEmpty else { throw Failure(message: "CDATA outside the root element") }
                    reader.index += 9
                    let data = try reader.skip(past: "]]>", what: "a CDATA section")
                    try handle(.text(String(decoding: data, as: UTF8.self)))
                } else if reader.starts(with: "<!") {
                    throw Failure(message: "a DTD or declaration: none is allowed")
                } else if reader.starts(with: "</") {
                    reader.index += 2
                    let name = reader.name()
                    reader.skipSpace()
                    guard reader.take(UInt8(ascii: ">")), let last = open.last, last == name else {
                        throw Failure(message: "the end tag </\(name.prefix(60))> does not close the open element")
                    }
                    open.removeLast()
                    try handle(.end(name))
                    if open.isEmpty { rootClosed = true }
                } else {
                    reader.index += 1
                    let name = reader.name()
                    guard !name.isEmpty else { throw Failure(message: "an element without a name") }
                    guard !rootClosed else { throw Failure(message: "content after the root element") }
                    elements += 1
                    guard elements <= maxElements, open.count < maxDepth else {
                        throw Failure(message: "more than \(maxElements) elements or \(maxDepth) levels")
                    }
                    var attributes: [(name: String, value: String)] = []
                    while true {
                        reader.skipSpace()
                        if reader.take(UInt8(ascii: ">")) {
                            open.append(name)
                            try handle(.start(name, attributes))
                            break
                        }
                        if reader.starts(with: "/>") {
                            reader.index += 2
                            try handle(.start(name, attributes))
                            try handle(.end(name))
                            if open.isEmpty { rootClosed = true }
                            break
                        }
                        let attribute = reader.name()
                        reader.skipSpace()
                        guard !attribute.isEmpty, attributes.count < 32, reader.take(UInt8(ascii: "=")) else {
                            throw Failure(message: "a malformed attribute in <\(name.prefix(60))>")
                        }
                        reader.skipSpace()
                        guard let quote = reader.peek, quote == UInt8(ascii: "\"") || quote == UInt8(ascii: "'")
                        else {
                            throw Failure(message: "an attribute value without quotes in <\(name.prefix(60))>")
                        }
                        reader.index += 1
                        let start = reader.index
                        while let byte = reader.peek, byte != quote {
                            guard byte != UInt8(ascii: "<") else { throw Failure(message: "< in an attribute value") }
                            reader.index += 1
                        }
                        guard reader.take(quote) else { throw Failure(message: "an unterminated attribute value") }
                        attributes.append((attribute, try unescape(bytes[start..<(reader.index - 1)])))
                    }
                }
            } else {
                let start = reader.index
                while let byte = reader.peek, byte != UInt8(ascii: "<") { reader.index += 1 }
                let text = bytes[start..<reader.index]
                if open.isEmpty {
                    guard text.allSatisfy(isSpace) else { throw Failure(message: "text outside the root element") }
                } else {
                    try handle(.text(try unescape(text)))
                }
            }
        }
        guard rootClosed, open.isEmpty else { throw Failure(message: "the document ends before its root element does") }
    }

    /// `encoding="…"` of an XML declaration's body.
    package static func declaredEncoding(_ body: ArraySlice<UInt8>) -> String? {
        let text = String(decoding: body, as: UTF8.self)
        guard let range = text.range(of: "encoding") else { return nil }
        let rest = text[range.upperBound...].drop { $0 == " " || $0 == "=" || $0 == "\t" }
        guard let quote = rest.first, quote == "\"" || quote == "'" else { return nil }
        return String(rest.dropFirst().prefix { $0 != quote })
    }

    package static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }

    /// Text with its references replaced: `&lt; &gt; &amp; &quot; &apos; &#N; &#xN;`.
    package static func unescape(_ text: ArraySlice<UInt8>) throws -> String {
        guard text.contains(UInt8(ascii: "&")) else { return String(decoding: text, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var index = text.startIndex
        while index < text.endIndex {
            let byte = text[index]
            guard byte == UInt8(ascii: "&") else {
                out.append(byte)
                index += 1
                continue
            }
            guard let semicolon = text[index...].prefix(12).firstIndex(of: UInt8(ascii: ";")) else {
                throw Failure(message: "an & that starts no reference")
            }
            let name = String(decoding: text[(index + 1)..<semicolon], as: UTF8.self)
            let scalar: Unicode.Scalar?
            switch name {
            case "lt": scalar = "<"
            case "gt": scalar = ">"
            case "amp": scalar = "&"
            case "quot": scalar = "\""
            case "apos": scalar = "'"
            default:
                // trap-ok: String parses, nil when out of range; Unicode.Scalar's init is failable too.
                if name.hasPrefix("#x") || name.hasPrefix("#X") {
                    scalar = UInt32(name.dropFirst(2), radix: 16).flatMap(Unicode.Scalar.init)
                } else if name.hasPrefix("#") {
                    scalar = UInt32(name.dropFirst(), radix: 10).flatMap(Unicode.Scalar.init)  // trap-ok: as above
                } else {
                    scalar = nil
                }
            }
            guard let scalar, scalar.value >= 0x20 || [0x09, 0x0A, 0x0D].contains(scalar.value) else {
                throw Failure(message: "&\(name.prefix(12)); is not a reference this reader knows")
            }
            out += Array(String(Character(scalar)).utf8)
            index = semicolon + 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    package struct Cursor {
        let bytes: [UInt8]
        var index = 0

        var atEnd: Bool { index >= bytes.count }
        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        func starts(with prefix: StaticString) -> Bool {
            let count = prefix.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            return prefix.withUTF8Buffer { bytes[index..<(index + count)].elementsEqual($0) }
        }

        mutating func take(_ byte: UInt8) -> Bool {
            guard peek == byte else { return false }
            index += 1
            return true
        }

        mutating func skipSpace() { while let byte = peek, XMLSubset.isSpace(byte) { index += 1 } }

        /// A name: everything up to a space, `/`, `>`, `=`, `<` or a quote.
        mutating func name() -> String {
            let start = index
            while let byte = peek, !XMLSubset.isSpace(byte),
                ![
                    UInt8(ascii: "/"), UInt8(ascii: ">"), UInt8(ascii: "="), UInt8(ascii: "<"), UInt8(ascii: "\""),
                    UInt8(ascii: "'"),
                ].contains(byte)
            {
                index += 1
            }
            return String(decoding: bytes[start..<index], as: UTF8.self)
        }

        /// The bytes up to `terminator` (the cursor moves past it); a failure naming `what` when
        /// the body ends first. One forward scan.
        mutating func skip(past terminator: StaticString, what: String) throws -> ArraySlice<UInt8> {
            let start = index
            let needle = terminator.withUTF8Buffer { Array($0) }
            while index + needle.count <= bytes.count {
                if bytes[index] == needle[0], bytes[index..<(index + needle.count)].elementsEqual(needle) {
                    let found = bytes[start..<index]
                    index += needle.count
                    return found
                }
                index += 1
            }
            throw Failure(message: "\(what) that does not end")
        }
    }
}
