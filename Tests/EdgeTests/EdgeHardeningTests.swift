import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import Testing

@testable import Edge

/// Inputs that once broke a service (issue 12), at the unit that now refuses them: edge.
@Suite("hardening: edge")
struct EdgeHardeningTests {
    @Test("uploaded content is never sniffed, and is a download unless an image, a sound or a video")
    func contentHeaders() {
        for type in [
            "text/html", "text/html; charset=utf-8", "image/svg+xml", "application/xhtml+xml", "application/pdf", "text/plain", "TEXT/HTML",
        ] {
            let headers = EdgeRoutes.contentHeaders(type)
            #expect(headers[.xContentTypeOptions] == "nosniff")
            #expect(headers[.contentDisposition] == "attachment", "\(type)")
            #expect(headers[.contentSecurityPolicy]?.contains("sandbox") == true)
        }
        for type in ["image/png", "image/jpeg", "audio/mpeg", "video/mp4", "IMAGE/PNG; q=1"] {
            let headers = EdgeRoutes.contentHeaders(type)
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
        let document = try #require(try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.json.utf8)) as? [String: Any])
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
