import HeraldModel
import HeraldTestSupport
import Testing

@Suite("multipart bodies", .watchedForStalls)
struct MultipartTests {
    static func body(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test("a browser's form: fields, a file with its type and name, CRLF before each delimiter kept out of content")
    func form() {
        let body = Self.body(
            "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"_csrf\"\r\n\r\ntok\r\n"
                + "--XyZ\r\nContent-Disposition: form-data; name=\"key\"; filename=\"a.pem\"\r\n"
                + "Content-Type: application/x-pem-file\r\n\r\nline1\nline2\n\r\n--XyZ--\r\nepilogue")
        let parts = Multipart.parts(body, boundary: "XyZ")
        #expect(parts.count == 2)
        #expect(parts.first?.name == "_csrf" && parts.first?.content == Self.body("tok"))
        #expect(parts.first?.contentType == nil)
        #expect(parts.last?.name == "key" && parts.last?.contentType == "application/x-pem-file")
        #expect(parts.last?.content == Self.body("line1\nline2\n"))
    }

    @Test("parameters: quoted with escapes, bare, any case, spaces around =; filename= is not name=")
    func parameters() {
        #expect(Multipart.parameter("name", of: #"form-data; filename="x"; name="a\"b""#) == #"a"b"#)
        #expect(Multipart.parameter("name", of: "form-data;NAME = field ;x=y") == "field")
        #expect(Multipart.parameter("name", of: #"form-data; filename="n""#) == nil)
        #expect(Multipart.parameter("name", of: "form-data") == nil)
        #expect(Multipart.parameter("name", of: "form-data; name") == nil)
        #expect(Multipart.parameter("name", of: #"form-data; name=""#) == "")
        #expect(Multipart.boundary(contentType: #"multipart/mixed; boundary = "b c""#) == "b c")
        #expect(
            Multipart.boundary(contentType: "multipart/form-data; charset=x; boundary=----WebKit1") == "----WebKit1")
        #expect(Multipart.boundary(contentType: "multipart/form-data; boundary=") == nil)
        #expect(Multipart.boundary(contentType: "multipart/form-data") == nil)
    }

    @Test("part headers with bytes of 0x80 and more (which trapped multipart-kit) are read as text")
    func highBytes() {
        var body = Self.body("--B\r\n")
        body += [0xC3, 0xA9]
        body += Self.body(": x\r\n\r\nv\r\n--B\r\n")
        body += [0xFF, 0xFE]
        body += Self.body(": y\r\nContent-Disposition: form-data; name=\"")
        body += [0xFF, 0x80]
        body += Self.body("\"\r\n\r\nw\r\n--B--\r\n")
        let parts = Multipart.parts(body, boundary: "B")
        #expect(parts.count == 2)
        #expect(parts.first?.headers["é"] == "x" && parts.first?.name == nil)
        #expect(parts.last?.name == "\u{FFFD}\u{FFFD}")
        #expect(parts.last?.content == Self.body("w"))
    }

    @Test("no delimiter, one delimiter, no headers' end: no part or an empty one, never a trap")
    func degenerate() {
        for text in ["", "--B", "--B--", "x--B\r\n", "--B\r\nname: v", "--B\r\n\r\n--B--", "--B\n\n--B", "--B--B--B"] {
            for part in Multipart.parts(Self.body(text), boundary: "B") {
                #expect(part.content.count <= text.utf8.count, "\(text)")
            }
        }
        #expect(Multipart.parts(Self.body("--B\r\nh: v\r\n\r\nc\r\n--B--"), boundary: "B").map(\.content) == [[99]])
    }
}
