import HeraldModel
import HeraldTestSupport
import Testing

@Suite("tag expressions", .watchedForStalls)
struct TagExpressionTests {
    func parse(_ text: String) throws -> TagExpression { try TagExpression(text) }

    @Test("precedence: ! over && over ||, parentheses override, whitespace optional")
    func precedence() throws {
        #expect(try parse("a || b && c").root == .or([.tag("a"), .and([.tag("b"), .tag("c")])]))
        #expect(try parse("a && b || c").root == .or([.and([.tag("a"), .tag("b")]), .tag("c")]))
        #expect(try parse("!a && b").root == .and([.not(.tag("a")), .tag("b")]))
        #expect(try parse("!(a && b)").root == .not(.and([.tag("a"), .tag("b")])))
        #expect(try parse("(a || b) && c").root == .and([.or([.tag("a"), .tag("b")]), .tag("c")]))
        #expect(try parse("a||b").root == parse("  a ||\tb ").root)
        #expect(try parse("!!a").root == .tag("a"))
        // The docs' own examples.
        #expect(
            try parse("(follows_RedSox || follows_Cardinals) && location_Boston").description
                == "(follows_RedSox || follows_Cardinals) && location_Boston")
        #expect(
            try parse("(location_Boston && !follows_Cardinals)").description == "location_Boston && !follows_Cardinals")
        // A group of the same operator is one level with its parent, so the canonical text parses
        // back to the same tree (the fuzzer's tagexpr property found `(a || b) && (c && d)`).
        for (text, canonical) in [
            ("(a || b) && (c  && d)", "(a || b) && c && d"), ("a || (b || (c || d))", "a || b || c || d"),
            ("((a && b)) && !(c && d)", "a && b && !(c && d)"),
        ] {
            let expression = try parse(text)
            #expect(expression.description == canonical)
            #expect(try parse(expression.description).root == expression.root, "\(text)")
        }
    }

    @Test("evaluation follows the precedence")
    func evaluation() throws {
        let expression = try parse("a || b && !c")
        #expect(expression.matches(["a"]))
        #expect(expression.matches(["a", "c"]))
        #expect(expression.matches(["b"]))
        #expect(!expression.matches(["b", "c"]))
        #expect(!expression.matches([]))
        #expect(try parse("!a").matches([]))
    }

    @Test("tags: the NH alphabet, 120 characters, and the two system tags with their braces")
    func tags() throws {
        #expect(try parse("username:alice && loc.de-BE_1@x#y").tags == ["username:alice", "loc.de-BE_1@x#y"])
        #expect(try parse(String(repeating: "t", count: 120)).tags.count == 1)
        #expect(
            try parse("$InstallationId:{inst-1} || $userid:{bob=1@x}").tags == [
                "$InstallationId:{inst-1}", "$UserId:{bob=1@x}",
            ])
        #expect(throws: TagExpression.ParseError(position: 1, message: "a tag is at most 120 characters")) {
            try parse(String(repeating: "t", count: 121))
        }
        #expect(throws: TagExpression.ParseError.self) { try parse("$InstallationId:[inst-1]") }
        #expect(throws: TagExpression.ParseError.self) { try parse("$InstallationId:{}") }
        #expect(throws: TagExpression.ParseError.self) { try parse("$Other:{x}") }
    }

    @Test("syntax errors name the position (1-based) and what was expected")
    func syntaxErrors() {
        let cases: [(String, Int, String)] = [
            ("", 1, "expected a tag, found the end"),
            ("a &&", 5, "expected a tag, found the end"),
            ("a && && b", 6, "expected a tag before \"&\""),
            ("a & b", 3, "expected && or || before \"&\""),
            ("a b", 3, "expected && or || before \"b\""),
            ("(a || b", 1, "the ( here is never closed"),
            ("a)", 2, "a ')' without its '('"),
            ("a && b,c", 7, "expected && or || before \",\""),
            ("tag with space", 5, "expected && or || before \"w\""),
            ("a && é", 6, "\"é\" is not allowed in a tag (A-Z a-z 0-9 _ @ # . : -)"),
            ("(a b)", 4, "expected ) or an operator before \"b\""),
        ]
        for (text, position, message) in cases {
            #expect(throws: TagExpression.ParseError(position: position, message: message), "\(text)") {
                try parse(text)
            }
        }
        #expect(
            "\(TagExpression.ParseError(position: 3, message: "expected && or || before \"&\""))"
                == "tag expression, at character 3: expected && or || before \"&\"")
    }

    @Test("limits: 20 tags with only ||, 6 otherwise, and a nesting bound")
    func limits() throws {
        let tags = (1...21).map { "t\($0)" }
        #expect(try parse(tags.prefix(20).joined(separator: " || ")).tags.count == 20)
        #expect(
            try parse(
                "(" + tags.prefix(10).joined(separator: "||") + ") || (" + tags[10..<20].joined(separator: "||") + ")"
            ).tags.count
                == 20)
        #expect(
            throws: TagExpression.ParseError(position: 0, message: "21 tags; at most 20 when the only operator is ||")
        ) {
            try parse(tags.joined(separator: " || "))
        }
        #expect(try parse(tags.prefix(6).joined(separator: " && ")).tags.count == 6)
        #expect(throws: TagExpression.ParseError(position: 0, message: "7 tags; at most 6 with && or !")) {
            try parse(tags.prefix(6).joined(separator: " || ") + " && t7")
        }
        #expect(throws: TagExpression.ParseError(position: 0, message: "7 tags; at most 6 with && or !")) {
            try parse("!" + tags.prefix(7).joined(separator: " || "))
        }
        #expect(throws: TagExpression.ParseError.self) {
            try parse(String(repeating: "(", count: 100) + "a" + String(repeating: ")", count: 100))
        }
        // Negations fold as they are parsed: however many '!', the tree holds at most one per level.
        #expect(try parse(String(repeating: "!", count: 62) + "a").root == .tag("a"))
        #expect(try parse(String(repeating: "!", count: 63) + "a").root == .not(.tag("a")))
        #expect(try parse("!!(a && !!!b)").description == "a && !b")
        #expect(throws: TagExpression.ParseError.self) { try parse(String(repeating: "!", count: 64) + "a") }
        // Padding is bounded too: a 70 KB expression of spaces around one tag is refused whole.
        let padded = String(repeating: " ", count: 70_000) + "a"
        #expect(throws: TagExpression.ParseError(position: 0, message: "longer than 4096 characters")) {
            try parse(padded)
        }
        #expect(try parse(String(repeating: " ", count: 4000) + "a").tags == ["a"])
    }

    @Test("cover: the tags every match has one of, when they exist")
    func cover() throws {
        #expect(try parse("a").cover == ["a"])
        #expect(try parse("a && !b").cover == ["a"])
        #expect(try parse("(a || b) && c").cover == ["c"])
        #expect(try parse("a || b").cover == ["a", "b"])
        #expect(try parse("!a").cover == nil)
        #expect(try parse("a || !b").cover == nil)
    }
}
