import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
import Testing

@testable import Edge

/// Inputs that once broke a service, at the unit that now refuses them: edge.
@Suite("hardening: edge", .watchedForStalls)
struct EdgeHardeningTests {
    @Test("uploaded content is never sniffed, and is a download unless an image, a sound or a video")
    func contentHeaders() {
        for type in [
            "text/html", "text/html; charset=utf-8", "image/svg+xml", "application/xhtml+xml", "application/pdf",
            "text/plain", "TEXT/HTML",
        ] {
            let headers = TutorialRoutes.contentHeaders(type)
            #expect(headers[.xContentTypeOptions] == "nosniff")
            #expect(headers[.contentDisposition] == "attachment", "\(type)")
            #expect(headers[.contentSecurityPolicy]?.contains("sandbox") == true)
        }
        for type in ["image/png", "image/jpeg", "audio/mpeg", "video/mp4", "IMAGE/PNG; q=1"] {
            let headers = TutorialRoutes.contentHeaders(type)
            #expect(headers[.xContentTypeOptions] == "nosniff")
            #expect(headers[.contentDisposition] == nil, "\(type)")
        }
    }

    @Test("the edge's JSON error body is the shape every client reads")
    func errorBody() throws {
        let body = EdgeError(.badRequest, #"a "quoted" \ message"#).jsonBody()
        let object = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: String])
        #expect(object == ["error": "bad_request", "message": #"a "quoted" \ message"#])
    }

    @Test("the OpenAPI document the edge serves is JSON with every route")
    func openAPI() throws {
        let document = try #require(
            try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.json.utf8)) as? [String: Any])
        #expect(document["openapi"] as? String == "3.1.0")
        let paths = try #require(document["paths"] as? [String: Any])
        for path in [
            "/api/register", "/api/register/{id}", "/api/notifications", "/api/notifications/{id}", "/v1/notifications",
            "/v1/notifications/{id}/outcome", "/v1/auth/token", "/healthz", "/readyz", "/metrics", "/openapi.json",
        ] {
            #expect(paths[path] != nil, "\(path)")
        }
    }
}

@Suite("secure body JSON", .watchedForStalls)
struct SecureBodyJSONTests {
    struct Decoded: Decodable, Equatable {
        let Id: Int64
        let Payload: String
        let Read: Bool
    }

    @Test("the hand-written secure body is what JSONEncoder writes, and reads back the same")
    func sameAsEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for (id, text, read) in [
            (Int64(1), "Secure confirmation.", false), (Int64.max, #"a "quote" \ back\slash a/b"#, true),
            (7, "emoji 🔔 é </script>", false), (42, "", true), (3, "tab\tnew\nline\r", false),
        ] {
            let body = SecureBody(Id: id, Payload: text, Read: read)
            #expect(body.json == String(decoding: try encoder.encode(body), as: UTF8.self))
            #expect(
                try JSONDecoder().decode(Decoded.self, from: Data(body.json.utf8))
                    == Decoded(Id: id, Payload: text, Read: read))
        }
        // Other control characters: JSONEncoder's spelling may differ, the value may not.
        let control = SecureBody(Id: 9, Payload: "bell\u{7} nul\u{0} esc\u{1b}", Read: false)
        #expect(try JSONDecoder().decode(Decoded.self, from: Data(control.json.utf8)).Payload == control.Payload)
    }
}
