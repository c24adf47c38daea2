import Edge
import Foundation
import HeraldProto
import HeraldTestSupport
import Testing

@Suite("native payloads", .watchedForStalls)
struct NativePayloadTests {
    @Test("JSON escaping keeps any text intact, slashes unescaped")
    func json() throws {
        for text in [#"a "quote" \ back\slash"#, "tab\tnew\nline\u{1}", "emoji 🔔 and é", "</script>", ""] {
            let literal = NativePayloads.jsonString(text)
            let decoded =
                try JSONSerialization.jsonObject(with: Data(literal.utf8), options: .fragmentsAllowed) as? String
            #expect(decoded == text)
        }
        #expect(NativePayloads.jsonString("a/b") == #""a/b""#)
    }

    @Test("XML escaping covers the five specials and drops what XML 1.0 cannot carry")
    func xml() {
        #expect(
            NativePayloads.xmlEscaped(#"<a href="x">Tom & 'Jerry'</a>"#)
                == "&lt;a href=&quot;x&quot;&gt;Tom &amp; &apos;Jerry&apos;&lt;/a&gt;")
        #expect(NativePayloads.xmlEscaped("bell\u{7} tab\t ok") == "bell tab\t ok")
    }

    @Test("each kind has the contract's bytes and delivery options")
    func shapes() throws {
        let secure = NativePayloads.secure(id: 7)
        #expect(secure.map(\.platform) == [.apns, .fcm, .wns, .browser])
        #expect(String(decoding: secure[3].body, as: UTF8.self) == #"{"secureId":"7"}"#)
        #expect(String(decoding: secure[0].body, as: UTF8.self) == #"{"aps":{"content-available":1},"secureId":"7"}"#)
        #expect(secure[0].pushType == "background" && secure[0].priority == 5)
        #expect(String(decoding: secure[2].body, as: UTF8.self) == "7" && secure[2].pushType == "wns/raw")

        let rich = NativePayloads.rich(id: 8, message: #"say "hi""#, richType: "img")
        #expect(
            String(decoding: rich[0].body, as: UTF8.self)
                == #"{"aps":{"content-available":1,"sound":""},"richId":"8","richMessage":"say \"hi\"","richType":"img"}"#
        )

        let alert = NativePayloads.alert("From a: x", platforms: [.apns])
        #expect(alert.count == 1)
        #expect(String(decoding: alert[0].body, as: UTF8.self) == #"{"aps":{"alert":"From a: x"}}"#)
        #expect(alert[0].pushType == "alert" && alert[0].priority == 10)
    }

    @Test("the built-in rich image is a PNG")
    func defaultImage() {
        #expect(DefaultRichImage.bytes.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]))
        #expect(DefaultRichImage.contentType == "image/png")
        // The same bytes ship as a file, for the README's upload example and for anyone to look at.
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("services/edge/herald.png")
        #expect(FileManager.default.contents(atPath: file.path).map { [UInt8]($0) } == DefaultRichImage.bytes)
    }
}
