import Foundation
import HeraldModel

/// A Notification Hubs template (docs/notification-hubs.md, "Templates"): a JSON or XML body whose string values (JSON) or
/// attribute values and text (XML) may be expressions over a send's properties.
///
/// Which strings are expressions follows NH's own validator: a string is an expression only when
/// its first character is `$`, `.`, `%`, `#` or `{`; anything else is copied as it is (so
/// `"Hello $(name)"` is a literal; write `"{'Hello ' + $(name)}"`). Expressions:
///
/// | form | value |
/// |---|---|
/// | `$(p)`, `$(p, n)` | property `p` (names are case-insensitive), clipped to n characters |
/// | `.(p, n)` | clipped to n characters, the last three `...` when clipped |
/// | `%(p)` | URI-encoded |
/// | `#(p)` | in JSON, a number when the value looks like one (`"badge":"#(n)"` → `"badge":3`) |
/// | `$(p:{default})` | the default when `p` is missing (`\}` and `\\` escape), for every form |
/// | `{a + 'text' + b}` | concatenation of `$`, `.`, `%` terms and `'…'`/`"…"` literals (`''` escapes) |
///
/// A missing property without a default is the empty string. The body is parsed once, when an
/// installation is written (so a bad template is refused there) and when a send renders it; a
/// render only fills the slots, so its output is valid JSON or XML whatever the properties hold.
public struct PushTemplate: Sendable {
    public enum Format: Sendable { case json, xml }

    public let format: Format
    /// Literal text and the slots between it, in order.
    private let pieces: [Piece]

    private enum Piece: Sendable {
        case literal(String)
        /// An expression in a JSON string value (rendered quoted, or as a number for `#`).
        case jsonValue(Expression)
        /// An expression in XML text or an attribute value (rendered escaped).
        case xmlValue(Expression, attribute: Bool)
    }

    /// What a template's text failed on, for a 400 naming it.
    public struct ParseError: Error, Sendable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
        package init(_ message: String) { self.message = message }
    }

    /// Property names: NH's rule.
    public static let maxPropertyNameLength = 120

    /// Parses `body`: JSON when it starts (after white space) with `{` or `[`, else XML.
    public init(_ body: String) throws(ParseError) {
        let trimmed = body.drop { $0.isWhitespace }
        if trimmed.first == "{" || trimmed.first == "[" {
            format = .json
            pieces = try Self.parseJSON(body)
        } else if trimmed.first == "<" {
            format = .xml
            pieces = try Self.parseXML(body)
        } else {
            throw ParseError("a template body is a JSON or an XML document")
        }
    }

    /// A single expression (a header value, the APNs expiry): literal unless it starts with an
    /// expression character, as in a body.
    public static func renderValue(_ text: String, _ properties: Properties) throws(ParseError) -> String {
        guard let first = text.first, Expression.starters.contains(first) else { return text }
        return try Expression.parse(text).evaluate(properties)
    }

    /// The body with every expression replaced.
    public func render(_ properties: Properties) -> String {
        var out = ""
        for piece in pieces {
            switch piece {
            case .literal(let text): out += text
            case .jsonValue(let expression):
                let value = expression.evaluate(properties)
                if expression.isNumeric, Self.looksNumeric(value) {
                    out += value
                } else {
                    out += jsonStringLiteral(value)
                }
            case .xmlValue(let expression, let attribute):
                out += xmlEscaped(expression.evaluate(properties), quotes: attribute)
            }
        }
        return out
    }

    /// A send's properties, looked up case-insensitively.
    public struct Properties: Sendable {
        var values: [String: String] = [:]

        public init(_ pairs: [(String, String)]) {
            for (name, value) in pairs { values[name.lowercased()] = value }
        }

        subscript(name: String) -> String? { values[name.lowercased()] }
    }

    /// NH's number test for `#()`: `(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    package static func looksNumeric(_ value: String) -> Bool {
        var bytes = value.utf8[...]
        func digits() -> Int {
            let count = bytes.prefix { $0 >= 0x30 && $0 <= 0x39 }.count
            bytes = bytes.dropFirst(count)
            return count
        }
        guard let first = bytes.first else { return false }
        if first == UInt8(ascii: "0") {
            bytes = bytes.dropFirst()
        } else if digits() == 0 {
            return false
        }
        if bytes.first == UInt8(ascii: ".") {
            bytes = bytes.dropFirst()
            guard digits() > 0 else { return false }
        }
        if bytes.first == UInt8(ascii: "e") || bytes.first == UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            if bytes.first == UInt8(ascii: "+") || bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
            guard digits() > 0 else { return false }
        }
        return bytes.isEmpty
    }

    // MARK: JSON

    /// Walks the JSON text: keys and non-string values are copied, string values become slots when
    /// they are expressions. The document must be valid JSON.
    private static func parseJSON(_ body: String) throws(ParseError) -> [Piece] {
        guard (try? JSONSerialization.jsonObject(with: Data(body.utf8), options: [.fragmentsAllowed])) != nil else {
            throw ParseError("the template body is not valid JSON")
        }
        let bytes = Array(body.utf8)
        var pieces: [Piece] = []
        var literalStart = 0
        // The open containers: whether each is an object, and whether its next string is a key.
        var containers: [(object: Bool, expectsKey: Bool)] = []
        var i = 0
        while i < bytes.count {
            switch bytes[i] {
            case UInt8(ascii: "{"):
                containers.append((true, true))
                i += 1
            case UInt8(ascii: "["):
                containers.append((false, false))
                i += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                containers.removeLast()
                i += 1
            case UInt8(ascii: ":"):
                containers[containers.count - 1].expectsKey = false
                i += 1
            case UInt8(ascii: ","):
                containers[containers.count - 1].expectsKey = containers[containers.count - 1].object
                i += 1
            case UInt8(ascii: "\""):
                let start = i
                i += 1
                while i < bytes.count, bytes[i] != UInt8(ascii: "\"") {
                    i += bytes[i] == UInt8(ascii: "\\") ? 2 : 1
                }
                i += 1
                if containers.last?.expectsKey == true { continue }
                let literal = String(decoding: bytes[start..<i], as: UTF8.self)
                guard
                    let text = try? JSONSerialization.jsonObject(with: Data(literal.utf8), options: [.fragmentsAllowed])
                        as? String,
                    let first = text.first, Expression.starters.contains(first)
                else { continue }
                let expression = try Expression.parse(text)
                pieces.append(.literal(String(decoding: bytes[literalStart..<start], as: UTF8.self)))
                pieces.append(.jsonValue(expression))
                literalStart = i
            default:
                i += 1
            }
        }
        pieces.append(.literal(String(decoding: bytes[literalStart...], as: UTF8.self)))
        return pieces
    }

    // MARK: XML

    /// Walks the XML text: markup is copied; text between tags and attribute values become slots
    /// when they are expressions. Comments, CDATA, declarations and processing instructions are
    /// copied whole.
    private static func parseXML(_ body: String) throws(ParseError) -> [Piece] {
        let bytes = Array(body.utf8)
        var pieces: [Piece] = []
        var literalStart = 0
        var i = 0
        var open: [String] = []
        func slot(_ range: Range<Int>, attribute: Bool) throws(ParseError) {
            let raw = String(decoding: bytes[range], as: UTF8.self)
            let text = xmlUnescaped(raw)
            guard let first = text.first, Expression.starters.contains(first) else { return }
            let expression = try Expression.parse(text)
            pieces.append(.literal(String(decoding: bytes[literalStart..<range.lowerBound], as: UTF8.self)))
            pieces.append(.xmlValue(expression, attribute: attribute))
            literalStart = range.upperBound
        }
        func skip(past terminator: String) throws(ParseError) {
            let end = Array(terminator.utf8)
            while i < bytes.count {
                if bytes[i] == end[0], bytes[i...].starts(with: end) {
                    i += end.count
                    return
                }
                i += 1
            }
            throw ParseError("the template body is not well-formed XML: \(terminator) missing")
        }
        while i < bytes.count {
            if bytes[i] != UInt8(ascii: "<") {
                let start = i
                while i < bytes.count, bytes[i] != UInt8(ascii: "<") { i += 1 }
                if !open.isEmpty { try slot(start..<i, attribute: false) }
                continue
            }
            let rest = bytes[i...]
            if rest.starts(with: Array("<!--".utf8)) {
                try skip(past: "-->")
            } else if rest.starts(with: Array("<![CDATA[".utf8)) {
                try skip(past: "]]>")
            } else if rest.starts(with: Array("<?".utf8)) {
                try skip(past: "?>")
            } else if rest.starts(with: Array("<!".utf8)) {
                try skip(past: ">")
            } else if rest.starts(with: Array("</".utf8)) {
                let start = i + 2
                try skip(past: ">")
                let name = String(decoding: bytes[start..<(i - 1)], as: UTF8.self).trimmingCharacters(in: .whitespaces)
                guard open.last == name else {
                    throw ParseError("the template body is not well-formed XML: </\(name)> closes nothing")
                }
                open.removeLast()
            } else {
                // A start tag: its name, then attributes until > or />.
                i += 1
                let nameStart = i
                while i < bytes.count, !isXMLSpace(bytes[i]), bytes[i] != UInt8(ascii: ">"),
                    bytes[i] != UInt8(ascii: "/")
                { i += 1 }
                let name = String(decoding: bytes[nameStart..<i], as: UTF8.self)
                guard !name.isEmpty else {
                    throw ParseError("the template body is not well-formed XML: a tag without a name")
                }
                var selfClosing = false
                while true {
                    guard i < bytes.count else {
                        throw ParseError("the template body is not well-formed XML: <\(name) is not closed")
                    }
                    let byte = bytes[i]
                    if byte == UInt8(ascii: ">") {
                        i += 1
                        break
                    }
                    if byte == UInt8(ascii: "/") {
                        selfClosing = true
                        i += 1
                        continue
                    }
                    if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "'") {
                        let quote = byte
                        let start = i + 1
                        i = start
                        while i < bytes.count, bytes[i] != quote { i += 1 }
                        guard i < bytes.count else {
                            throw ParseError("the template body is not well-formed XML: an attribute is not closed")
                        }
                        try slot(start..<i, attribute: true)
                        i += 1
                        continue
                    }
                    i += 1
                }
                if !selfClosing { open.append(name) }
            }
        }
        if let unclosed = open.last {
            throw ParseError("the template body is not well-formed XML: <\(unclosed)> is not closed")
        }
        pieces.append(.literal(String(decoding: bytes[literalStart...], as: UTF8.self)))
        return pieces
    }

    private static func isXMLSpace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    package static func xmlUnescaped(_ text: String) -> String {
        guard text.contains("&") else { return text }
        var out = text
        for (entity, value) in [("&lt;", "<"), ("&gt;", ">"), ("&quot;", "\""), ("&apos;", "'"), ("&amp;", "&")] {
            out = out.replacingOccurrences(of: entity, with: value)
        }
        return out
    }
}

/// One template expression: a function of one property, or a `{…}` concatenation.
struct Expression: Sendable {
    package static let starters: Set<Character> = ["$", ".", "%", "#", "{"]

    package enum Term: Sendable {
        case literal(String)
        case function(kind: Character, property: String, defaultValue: String?, length: Int?)
    }

    package let terms: [Term]
    /// A lone `#(p)`: a JSON number when the value looks like one.
    package var isNumeric: Bool {
        if terms.count == 1, case .function("#", _, _, _) = terms[0] { return true }
        return false
    }

    package static func parse(_ text: String) throws(PushTemplate.ParseError) -> Expression {
        var scanner = Scanner(Array(text.unicodeScalars), text: text)
        scanner.skipSpace()
        if scanner.peek == "{" {
            scanner.index += 1
            var terms: [Term] = []
            while true {
                scanner.skipSpace()
                let term = try scanner.term(composite: true)
                terms.append(term)
                scanner.skipSpace()
                if scanner.peek == "+" {
                    scanner.index += 1
                    continue
                }
                guard scanner.peek == "}" else { throw scanner.error("expected + or } in a composite expression") }
                scanner.index += 1
                break
            }
            scanner.skipSpace()
            guard scanner.atEnd else { throw scanner.error("text after the closing }") }
            return Expression(terms: terms)
        }
        let term = try scanner.term(composite: false)
        if case .literal = term { throw scanner.error("a literal must be inside { }") }
        scanner.skipSpace()
        guard scanner.atEnd else { throw scanner.error("text after the expression; join parts with {a + b}") }
        return Expression(terms: [term])
    }

    package func evaluate(_ properties: PushTemplate.Properties) -> String {
        var out = ""
        for term in terms {
            switch term {
            case .literal(let text): out += text
            case .function(let kind, let property, let defaultValue, let length):
                let value = properties[property] ?? defaultValue ?? ""
                switch kind {
                case ".":
                    let n = length ?? 0
                    out +=
                        value.count <= n
                        ? value : (n >= 3 ? String(value.prefix(n - 3)) + "..." : String(value.prefix(n)))
                case "%":
                    out += value.addingPercentEncoding(withAllowedCharacters: Self.unreserved) ?? ""
                default:
                    out += length.map { String(value.prefix($0)) } ?? value
                }
            }
        }
        return out
    }

    /// RFC 3986's unreserved characters: everything else is percent-encoded by `%()`.
    package static let unreserved = CharacterSet(
        charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")

    package struct Scanner {
        let scalars: [Unicode.Scalar]
        let text: String
        var index = 0

        package init(_ scalars: [Unicode.Scalar], text: String) {
            self.scalars = scalars
            self.text = text
        }

        var atEnd: Bool { index >= scalars.count }
        var peek: Unicode.Scalar? { atEnd ? nil : scalars[index] }

        mutating func skipSpace() {
            while let c = peek, c == " " || c == "\t" || c == "\n" || c == "\r" { index += 1 }
        }

        package func error(_ message: String) -> PushTemplate.ParseError {
            PushTemplate.ParseError("template expression \"\(text.prefix(80))\", at character \(index + 1): \(message)")
        }

        mutating func term(composite: Bool) throws(PushTemplate.ParseError) -> Term {
            guard let c = peek else { throw error("expected an expression") }
            if c == "'" || c == "\"" {
                index += 1
                var literal = ""
                while true {
                    guard let d = peek else { throw error("a literal is not closed") }
                    index += 1
                    if d == c {
                        if peek == c {  // a doubled quote is the quote
                            literal.unicodeScalars.append(c)
                            index += 1
                            continue
                        }
                        return .literal(literal)
                    }
                    literal.unicodeScalars.append(d)
                }
            }
            guard ["$", ".", "%", "#"].contains(c) else {
                throw error("expected $(…), .(…), %(…), #(…) or a quoted literal")
            }
            let kind = Character(c)
            if kind == "#", composite { throw error("#(…) is not allowed in a composite expression") }
            index += 1
            guard peek == "(" else {
                throw error(
                    kind == "$"
                        ? "expected ( after $ ($body and other forms are not supported)" : "expected ( after \(kind)")
            }
            index += 1
            skipSpace()
            var name = ""
            while let d = peek, (d >= "A" && d <= "Z") || (d >= "a" && d <= "z") || (d >= "0" && d <= "9") || d == "_" {
                name.unicodeScalars.append(d)
                index += 1
            }
            guard !name.isEmpty else { throw error("expected a property name: A-Z a-z 0-9 _") }
            guard name.count <= PushTemplate.maxPropertyNameLength else {
                throw error("a property name is at most \(PushTemplate.maxPropertyNameLength) characters")
            }
            skipSpace()
            var defaultValue: String?
            if peek == ":" {
                index += 1
                guard peek == "{" else { throw error("expected { after : (a default is written :{text})") }
                index += 1
                var value = ""
                while true {
                    guard let d = peek else { throw error("a default is not closed with }") }
                    index += 1
                    if d == "\\", let next = peek {
                        value.unicodeScalars.append(next)
                        index += 1
                        continue
                    }
                    if d == "}" { break }
                    value.unicodeScalars.append(d)
                }
                defaultValue = value
                skipSpace()
            }
            var length: Int?
            if peek == "," {
                guard kind == "$" || kind == "." else { throw error("\(kind)(…) takes no length") }
                index += 1
                skipSpace()
                var digits = ""
                while let d = peek, d >= "0", d <= "9" {
                    digits.unicodeScalars.append(d)
                    index += 1
                }
                guard let n = Int(digits), digits.count <= 9 else { throw error("a length is a non-negative integer") }
                length = n
                skipSpace()
            } else if kind == "." {
                throw error(".(…) needs a length: .(property, n)")
            }
            guard peek == ")" else { throw error("expected )") }
            index += 1
            return .function(kind: kind, property: name, defaultValue: defaultValue, length: length)
        }
    }
}
