/// A Notification Hubs tag expression: which devices a send reaches (`ServiceBusNotification-Tags`).
///
/// Grammar (NH documents the operators and the limits, not the precedence; this is the conventional
/// one, `!` binding tightest, then `&&`, then `||`):
///
/// ```
/// expr    := and ( "||" and )*
/// and     := unary ( "&&" unary )*
/// unary   := "!" unary | "(" expr ")" | tag
/// tag     := 1…120 of A-Z a-z 0-9 _ @ # . : -
///          | "$InstallationId:{" id "}" | "$UserId:{" id "}"    (prefix case-insensitive; id: A-Z a-z 0-9 - _ @ # . : =)
/// ```
///
/// Whitespace between tokens is optional (`a||b` and `a || b` are the same). Limits, as NH's: at most
/// 20 tags when the only operator is `||`, otherwise at most 6; and Herald's own: at most
/// ``maxLength`` characters, 64 levels of `!` and `(`. A syntax error names its position (1-based,
/// in characters) so that the edge's 400 can point at it.
///
/// `!!x` is `x`: negations are folded as they are parsed, so the tree, and the SQL made from it,
/// nest no deeper than the tags allow (39 `!` in a row once overflowed SQLite's parser stack).
public struct TagExpression: Sendable, Hashable, CustomStringConvertible {
    public indirect enum Node: Sendable, Hashable {
        case tag(String)
        case not(Node)
        case and([Node])
        case or([Node])
    }

    public let root: Node

    /// Most tags in an expression whose only operator is `||`.
    public static let maxTagsOnlyOr = 20
    /// Most tags in any other expression.
    public static let maxTags = 6
    /// Longest expression, in characters: 20 tags of 120 characters with their operators fit with
    /// room for spaces and parentheses; padding beyond it is only load on every store it reaches.
    public static let maxLength = 4096

    /// A syntax error or a broken limit; `position` is 1-based, 0 when it is about the whole expression.
    public struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        public var position: Int
        public var message: String

        public init(position: Int, message: String) {
            self.position = position
            self.message = message
        }

        public var description: String {
            position > 0 ? "tag expression, at character \(position): \(message)" : "tag expression: \(message)"
        }
    }

    /// Parses `text`, or INVALID_ARGUMENT `"<field>: <the positioned error>"`: the one refusal every
    /// service gives for a bad expression.
    public static func validated(_ text: String, field: String) throws -> TagExpression {
        do {
            return try TagExpression(text)
        } catch {
            throw ServiceError.invalidArgument("\(field): \(error)")
        }
    }

    public init(_ text: String) throws(ParseError) {
        guard text.unicodeScalars.count <= Self.maxLength else {
            throw ParseError(position: 0, message: "longer than \(Self.maxLength) characters")
        }
        var parser = Parser(Array(text.unicodeScalars))
        let root = try parser.parseExpression()
        parser.skipSpace()
        if parser.index < parser.scalars.count {
            let rest = parser.scalars[parser.index]
            throw ParseError(
                position: parser.index + 1,
                message: rest == ")" ? "a ')' without its '('" : "expected && or || before \"\(String(rest))\"")
        }
        self.root = root
        let tags = self.tags.count
        if Self.onlyOr(root) {
            guard tags <= Self.maxTagsOnlyOr else {
                throw ParseError(
                    position: 0, message: "\(tags) tags; at most \(Self.maxTagsOnlyOr) when the only operator is ||")
            }
        } else {
            guard tags <= Self.maxTags else {
                throw ParseError(position: 0, message: "\(tags) tags; at most \(Self.maxTags) with && or !")
            }
        }
    }

    /// Every tag the expression names, in order of appearance.
    public var tags: [String] {
        var out: [String] = []
        func walk(_ node: Node) {
            switch node {
            case .tag(let tag): out.append(tag)
            case .not(let inner): walk(inner)
            case .and(let nodes), .or(let nodes): nodes.forEach(walk)
            }
        }
        walk(root)
        return out
    }

    /// Whether a device with `tags` is in the audience.
    public func matches(_ tags: Set<String>) -> Bool {
        func eval(_ node: Node) -> Bool {
            switch node {
            case .tag(let tag): tags.contains(tag)
            case .not(let inner): !eval(inner)
            case .and(let nodes): nodes.allSatisfy(eval)
            case .or(let nodes): nodes.contains(where: eval)
            }
        }
        return eval(root)
    }

    /// Tags of which every matching device has at least one, when there is such a set: the
    /// audience can then be read from those tags' index instead of from every device. `nil` when a
    /// device with none of the expression's tags can match (`!a`, `a || !b`).
    public var cover: [String]? {
        func cover(_ node: Node) -> Set<String>? {
            switch node {
            case .tag(let tag): return [tag]
            case .not: return nil
            case .and(let nodes):
                // Any one child's cover will do; the smallest reads the fewest index entries.
                return nodes.compactMap(cover).min { $0.count < $1.count }
            case .or(let nodes):
                var union: Set<String> = []
                for node in nodes {
                    guard let inner = cover(node) else { return nil }
                    union.formUnion(inner)
                }
                return union
            }
        }
        return cover(root).map { $0.sorted() }
    }

    /// Canonical text: single spaces around operators, parentheses only where precedence needs them.
    public var description: String {
        func text(_ node: Node, parent: Int) -> String {
            switch node {
            case .tag(let tag): return tag
            case .not(let inner): return "!" + text(inner, parent: 3)
            case .and(let nodes):
                let body = nodes.map { text($0, parent: 2) }.joined(separator: " && ")
                return parent > 2 ? "(\(body))" : body
            case .or(let nodes):
                let body = nodes.map { text($0, parent: 1) }.joined(separator: " || ")
                return parent > 1 ? "(\(body))" : body
            }
        }
        return text(root, parent: 0)
    }

    private static func onlyOr(_ node: Node) -> Bool {
        switch node {
        case .tag: true
        case .not, .and: false
        case .or(let nodes): nodes.allSatisfy(onlyOr)
        }
    }

    /// Recursive descent over Unicode scalars (positions in errors count scalars).
    private struct Parser {
        let scalars: [Unicode.Scalar]
        var index = 0
        var depth = 0

        init(_ scalars: [Unicode.Scalar]) { self.scalars = scalars }

        mutating func skipSpace() {
            while index < scalars.count, scalars[index] == " " || scalars[index] == "\t" { index += 1 }
        }

        mutating func take(_ token: String) -> Bool {
            skipSpace()
            let token = Array(token.unicodeScalars)
            guard index + token.count <= scalars.count, Array(scalars[index..<index + token.count]) == token else {
                return false
            }
            index += token.count
            return true
        }

        func error(_ message: String, at position: Int? = nil) -> ParseError {
            ParseError(position: (position ?? index) + 1, message: message)
        }

        // A parenthesized group of the same operator is spliced into its parent (`a && (b && c)` is
        // `a && b && c`), so that one expression has one tree, and its canonical text
        // (``TagExpression/description``) parses back to that very tree.
        mutating func parseExpression() throws(ParseError) -> Node {
            var nodes: [Node] = []
            repeat {
                let node = try parseAnd()
                if case .or(let inner) = node { nodes += inner } else { nodes.append(node) }
            } while take("||")
            return nodes.count == 1 ? nodes[0] : .or(nodes)
        }

        mutating func parseAnd() throws(ParseError) -> Node {
            var nodes: [Node] = []
            repeat {
                let node = try parseUnary()
                if case .and(let inner) = node { nodes += inner } else { nodes.append(node) }
            } while take("&&")
            return nodes.count == 1 ? nodes[0] : .and(nodes)
        }

        mutating func parseUnary() throws(ParseError) -> Node {
            skipSpace()
            // Bounded: an expression has at most 20 tags, so deep nesting is only an attack.
            guard depth < 64 else { throw error("nested too deeply") }
            if take("!") {
                depth += 1
                defer { depth -= 1 }
                let operand = try parseUnary()
                if case .not(let inner) = operand { return inner }  // !!x is x
                return .not(operand)
            }
            if take("(") {
                let open = index - 1
                depth += 1
                defer { depth -= 1 }
                let inner = try parseExpression()
                guard take(")") else {
                    skipSpace()
                    throw index < scalars.count
                        ? error("expected ) or an operator before \"\(String(scalars[index]))\"")
                        : error("the ( here is never closed", at: open)
                }
                return inner
            }
            return .tag(try parseTag())
        }

        mutating func parseTag() throws(ParseError) -> String {
            skipSpace()
            let start = index
            guard start < scalars.count else { throw error("expected a tag, found the end") }
            if scalars[start] == "$" {
                for prefix in ["$InstallationId:{", "$UserId:{"] {
                    let count = prefix.unicodeScalars.count
                    guard start + count <= scalars.count,
                        String(String.UnicodeScalarView(scalars[start..<start + count])).lowercased()
                            == prefix.lowercased()
                    else { continue }
                    var end = start + count
                    while end < scalars.count, Self.isSystemIDScalar(scalars[end]) { end += 1 }
                    guard end > start + count, end < scalars.count, scalars[end] == "}" else {
                        throw error("\(prefix)…} needs an id of A-Z a-z 0-9 - _ @ # . : = and a closing }", at: start)
                    }
                    index = end + 1
                    return prefix + String(String.UnicodeScalarView(scalars[start + count..<end])) + "}"
                }
                throw error("the only tags starting with $ are $InstallationId:{…} and $UserId:{…}", at: start)
            }
            var end = start
            while end < scalars.count, scalars[end].isASCII,
                Names.isTagByte(UInt8(truncatingIfNeeded: scalars[end].value))
            { end += 1 }
            guard end > start else {
                let found = scalars[start]
                throw error(
                    found == ")" || found == "&" || found == "|"
                        ? "expected a tag before \"\(String(found))\""
                        : "\"\(String(found))\" is not allowed in a tag (A-Z a-z 0-9 _ @ # . : -)")
            }
            guard end - start <= 120 else { throw error("a tag is at most 120 characters", at: start) }
            index = end
            return String(String.UnicodeScalarView(scalars[start..<end]))
        }

        static func isSystemIDScalar(_ scalar: Unicode.Scalar) -> Bool {
            scalar.isASCII && (Names.isTagByte(UInt8(truncatingIfNeeded: scalar.value)) || scalar == "=")
        }
    }
}
