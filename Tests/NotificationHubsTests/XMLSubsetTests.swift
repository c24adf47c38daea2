import HeraldTestSupport
import Testing

@testable import NotificationHubs

/// The XML reader NH's registration bodies go through (FoundationXML's crashed on hostile input).
@Suite("XML subset reader", .watchedForStalls)
struct XMLSubsetTests {
    static func events(_ text: String) throws -> [String] {
        var out: [String] = []
        try XMLSubset.parse(Array(text.utf8), maxElements: 50, maxDepth: 8) { event in
            switch event {
            case .start(let name, let attributes):
                out.append("<\(name)" + attributes.map { " \($0.name)=\($0.value)" }.joined() + ">")
            case .text(let text): out.append(text)
            case .end(let name): out.append("</\(name)>")
            }
        }
        return out
    }

    @Test("declaration, comments, attributes in either quote, references, CDATA and empty elements")
    func reads() throws {
        let text = #"""
            <?xml version="1.0" encoding="utf-8"?><!-- c --><a x='1' i:nil="true"><b>&lt;&amp;&#65;&#x42;&quot;</b><![CDATA[<raw>&amp;]]><c/></a>
            """#
        #expect(
            try Self.events(text) == [
                "<a x=1 i:nil=true>", "<b>", "<&AB\"", "</b>", "<raw>&amp;", "<c>", "</c>", "</a>",
            ])
    }

    @Test(
        "refused: DTDs, mismatched or missing ends, two roots, text outside, bad references, control characters, non-UTF-8, too deep",
        arguments: [
            "<!DOCTYPE a [<!ENTITY x \"y\">]><a/>", "<a><b></a>", "<a>", "<a/><b/>", "x<a/>", "<a>&bogus;</a>",
            "<a>&#0;</a>", "<a>\u{1}</a>", "<?xml encoding=\"UTF-16\"?><a/>", "<a x=1/>", "<a><![CDATA[x</a>",
            "<?xml", String(repeating: "<a>", count: 9) + String(repeating: "</a>", count: 9), "",
        ])
    func refuses(_ text: String) {
        #expect(throws: XMLSubset.Failure.self) { try Self.events(text) }
    }

    @Test("bytes that are not UTF-8 are refused")
    func notUTF8() {
        #expect(throws: XMLSubset.Failure.self) {
            try XMLSubset.parse([0x3C, 0x61, 0xDD, 0x2F, 0x3E], maxElements: 5, maxDepth: 5) { _ in }
        }
    }
}
