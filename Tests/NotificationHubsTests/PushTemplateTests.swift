import Foundation
import HeraldModel
import HeraldTestSupport
import NotificationHubs
import Testing

@Suite("NH templates", .watchedForStalls)
struct PushTemplateTests {
    static let properties = PushTemplate.Properties([
        ("Message", "Hello \"world\" <&>"), ("title", "This is the title line"), ("count", "40"), ("neg", "-1"),
        ("url", "a b/c?d=é"), ("empty", ""),
    ])

    func render(_ body: String, _ properties: PushTemplate.Properties = Self.properties) throws -> String {
        try PushTemplate(body).render(properties)
    }

    @Test(
        "every expression form in JSON: $, clipped $, ., %, #, defaults, composites; only strings starting with an expression character"
    )
    func jsonForms() throws {
        #expect(try render(#"{"a":"$(message)"}"#) == #"{"a":"Hello \"world\" <&>"}"#)
        #expect(try render(#"{"a":"$(MESSAGE, 5)"}"#) == #"{"a":"Hello"}"#)
        #expect(try render(#"{"a":".(title, 20)"}"#) == #"{"a":"This is the title..."}"#)
        #expect(try render(#"{"a":".(title, 22)"}"#) == #"{"a":"This is the title line"}"#)
        #expect(try render(#"{"a":".(title, 0)"}"#) == #"{"a":""}"#)
        #expect(try render(#"{"a":"%(url)"}"#) == #"{"a":"a%20b%2Fc%3Fd%3D%C3%A9"}"#)
        #expect(try render(##"{"aps":{"badge":"#(count)"}}"##) == ##"{"aps":{"badge":40}}"##)
        #expect(
            try render(##"{"b":"#(neg)","c":"#(title)","d":"#(missing)"}"##)
                == ##"{"b":"-1","c":"This is the title line","d":""}"##)
        #expect(
            try render(#"{"a":"$(missing)","b":"$(missing:{fallback \\} text})","c":"$(empty:{unused})"}"#)
                == #"{"a":"","b":"fallback } text","c":""}"#)
        #expect(
            try render(#"{"a":"{'Hi ' + $(title, 4) + ' - it''s ' + \"x\" + .(title, 10)}"}"#)
                == #"{"a":"Hi This - it's xThis is..."}"#)
        // Literals: not starting with an expression character, keys, numbers.
        #expect(
            try render(#"{"$(message)":"Hello $(message)","n":1,"l":[true,null,"$(count)"]}"#)
                == #"{"$(message)":"Hello $(message)","n":1,"l":[true,null,"40"]}"#)
        // The output is valid JSON whatever the properties hold.
        let hostile = PushTemplate.Properties([("p", "\"}],\u{0}\n\\")])
        let out = try render(#"{"a":"$(p)","b":["{'x' + $(p)}"]}"#, hostile)
        #expect((try? JSONSerialization.jsonObject(with: Data(out.utf8))) != nil, "\(out)")
    }

    @Test("XML bodies (WNS): text and attribute values, escaped; markup, comments and CDATA copied")
    func xmlForms() throws {
        let body =
            #"<?xml version="1.0"?><toast launch="$(url)"><!-- $(x) --><visual><binding template="ToastText01"><text id="1">$(message)</text><text id="2">{'n=' + $(count)}</text><text> $(message)</text><![CDATA[$(message)]]></binding></visual></toast>"#
        let out = try render(body)
        #expect(
            out
                == #"<?xml version="1.0"?><toast launch="a b/c?d=é"><!-- $(x) --><visual><binding template="ToastText01"><text id="1">Hello "world" &lt;&amp;&gt;</text><text id="2">n=40</text><text> $(message)</text><![CDATA[$(message)]]></binding></visual></toast>"#
        )
        let attribute = try render(#"<a b="$(message)"/>"#)
        #expect(attribute == #"<a b="Hello &quot;world&quot; &lt;&amp;&gt;"/>"#)
        // "&…" does not start with an expression character.
        #expect(try render(#"<a>&amp;$(x)</a>"#) == "<a>&amp;$(x)</a>")
    }

    @Test("bad templates are refused with the reason: each rule of NH's validator")
    func refusals() {
        for (body, reason) in [
            (#"{"a":"$(p"}"#, "expected )"), (#"{"a":"$body"}"#, "not supported"), (#"{"a":".(p)"}"#, "needs a length"),
            (##"{"a":"%(p, 3)"}"##, "takes no length"), (##"{"a":"#(p, 3)"}"##, "takes no length"),
            (#"{"a":"{$(p) + #(q)}"}"#, "not allowed in a composite"), (#"{"a":"{$(p) $(q)}"}"#, "expected + or }"),
            (#"{"a":"$(a-b)"}"#, "expected )"), (#"{"a":"$()"}"#, "property name"),
            (#"{"a":"$(p, -1)"}"#, "non-negative"),
            (#"{"a":"{'open}"}"#, "not closed"), (#"{"a":"$(p:{x)"}"#, "not closed"),
            (#"{"a":"$(p) tail"}"#, "text after"),
            ("{\"a\":\"$(\(String(repeating: "p", count: 121)))\"}", "at most 120"),
            (#"{"a":"$(p)""#, "not valid JSON"), ("<a>$(p)</b>", "closes nothing"), ("<a><b></a>", "closes nothing"),
            (#"<a b="$(p)>"#, "not closed"), ("plain text", "JSON or an XML"),
        ] {
            #expect(throws: PushTemplate.ParseError.self, "\(body)") { try PushTemplate(body) }
            do {
                _ = try PushTemplate(body)
            } catch {
                #expect(error.message.contains(reason), "\(body): \(error.message)")
            }
        }
    }

    @Test("a header or expiry value: an expression when it starts with one, else literal")
    func values() throws {
        #expect(try PushTemplate.renderValue("$(count)", Self.properties) == "40")
        #expect(try PushTemplate.renderValue("wns/toast", Self.properties) == "wns/toast")
        #expect(try PushTemplate.renderValue("{'x' + $(count)}", Self.properties) == "x40")
        #expect(throws: PushTemplate.ParseError.self) { try PushTemplate.renderValue("$(", Self.properties) }
    }
}
