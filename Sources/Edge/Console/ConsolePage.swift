import Foundation
import HTTPTypes
import HeraldModel
import Hummingbird
import Mustache
import NIOCore
import NIOHTTP1

/// How console pages are answered: Mustache templates in a layout, the security headers every
/// answer carries, and the forms they post back.
enum ConsolePage {
    /// Only this origin's own files; no inline script, no plugin, no framing; forms post here only.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    /// Parsed once: a template error is a programming error, found by the first test that renders.
    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        for (name, text) in ConsoleTemplates.all {
            do {
                try library.register(text, named: name)
            } catch {
                // trap-ok: the templates are compiled in; a unit test renders each, and this runs once at start.
                preconditionFailure("console template \(name) does not parse: \(error)")
            }
        }
        return library
    }()

    /// A page: `name`'s template with `view` (one of ``ConsoleView``'s structs), inside the layout
    /// (navigation, the sign-out form).
    static func render(
        _ name: String, title: String, session: ConsoleSession?, view: Any,
        status: HTTPResponse.Status = .ok,
        hub: String? = nil
    ) -> Response {
        let layout = ConsoleView.Layout(
            title: title, content: library.render(view, withTemplate: name) ?? "",
            session: session.map { ConsoleView.Session(user: $0.user, csrf: $0.csrf, admin: $0.admin) },
            hub: hub.map { ConsoleView.HubLink(name: $0, path: "/console/hubs/\(pathComponent($0))") })
        return html(library.render(layout, withTemplate: "layout") ?? "", status: status)
    }

    static func html(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static let securityHeaders: HTTPFields = [
        .contentSecurityPolicy: contentSecurityPolicy,
        .contentTypeOptions: "nosniff",
        .referrerPolicy: "no-referrer",
        .frameOptions: "DENY",
        .cacheControl: "no-store",
    ]

    static func asset(_ text: String, type: String) -> Response {
        var headers = securityHeaders
        headers[.contentType] = type
        headers[.cacheControl] = "max-age=3600"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    /// 303 See Other: after a form, the browser GETs the next page (reloading it repeats nothing).
    static func redirect(_ location: String, clearing session: Bool = false) -> Response {
        var headers = securityHeaders
        headers[.location] = location
        var response = Response(status: .seeOther, headers: headers)
        if session {
            response.setCookie(
                Cookie(
                    name: ConsoleRoutes.sessionCookie, value: "", maxAge: 0, path: "/console", httpOnly: true,
                    sameSite: .strict))
        }
        return response
    }

    /// A URL path segment for a hub name or an id (hub names are already URL-safe; ids too).
    static func pathComponent(_ text: String) -> String {
        text.addingPercentEncoding(
            withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/?#"))) ?? ""
    }

    /// A query string from pairs, empty values left out.
    static func query(_ pairs: [(String, String)]) -> String {
        var components = URLComponents()
        components.queryItems = pairs.filter { !$0.1.isEmpty }.map { URLQueryItem(name: $0.0, value: $0.1) }
        let encoded = components.percentEncodedQuery ?? ""
        return encoded.isEmpty ? "" : "?" + encoded.replacingOccurrences(of: "+", with: "%2B")
    }

    // MARK: forms

    /// A file a form uploaded.
    struct UploadedFile {
        var bytes: [UInt8]
        var type: String
    }

    /// The largest sign-in form: a user name, a password and the CSRF nonce, URL-encoded. Read
    /// before anyone is known, so it is small and read whole before it is parsed.
    static let maxSignInBytes = 4096

    /// The sign-in form's fields: `application/x-www-form-urlencoded` only, at most
    /// ``maxSignInBytes`` (413 above, 415 for any other type, multipart above all: its parser is
    /// for signed-in forms only).
    static func signInForm(_ request: Request) async throws -> [String: String] {
        guard mediaType(request) == "application/x-www-form-urlencoded" else {
            throw EdgeError(.unsupportedMediaType, "the sign-in form is application/x-www-form-urlencoded")
        }
        let body = try await EdgeHTTP.collect(request, upTo: maxSignInBytes)
        return fields(urlEncoded: String(decoding: body, as: UTF8.self))
    }

    /// A signed-in form's fields: `application/x-www-form-urlencoded`, or the text fields of
    /// `multipart/form-data` (see ``upload(_:_:session:)`` for its files).
    static func form(_ request: Request, _ config: EdgeConfig, session: ConsoleSession) async throws -> [String: String]
    {
        try await upload(request, config, session: session).fields
    }

    /// A signed-in form's fields and its uploaded files by field name: a `multipart/form-data` part
    /// with a Content-Type is a file (left out when empty: no file was chosen).
    ///
    /// A multipart body is parsed only once the session's CSRF token has been checked: its forms
    /// carry it in their action's query (`?_csrf=`), since the token inside the body cannot be read
    /// before the body is. A URL-encoded form's `_csrf` field is checked by its handler.
    static func upload(_ request: Request, _ config: EdgeConfig, session: ConsoleSession) async throws -> (
        fields: [String: String], files: [String: UploadedFile]
    ) {
        guard mediaType(request) == "multipart/form-data" else {
            let body = try await EdgeHTTP.collect(request, upTo: config.maxBodyBytes)
            return (fields(urlEncoded: String(decoding: body, as: UTF8.self)), [:])
        }
        try ConsoleRoutes.requireCSRF(query(request), session)
        var fields: [String: String] = [:]
        var files: [String: UploadedFile] = [:]
        for part in try await multipart(request, config) {
            guard let name = part.name else { continue }
            if let type = part.contentType {
                if !part.content.isEmpty { files[name] = UploadedFile(bytes: part.content, type: type) }
            } else {
                fields[name] = String(decoding: part.content, as: UTF8.self)
            }
        }
        return (fields, files)
    }

    /// The Content-Type's media type in lower case, without its parameters.
    static func mediaType(_ request: Request) -> String {
        let value = request.headers.value(.contentType) ?? ""
        return (value.split(separator: ";", maxSplits: 1).first.map(String.init) ?? "")
            .trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// A GET form's fields, from the query string.
    static func query(_ request: Request) -> [String: String] { fields(urlEncoded: request.uri.query ?? "") }

    /// `application/x-www-form-urlencoded` fields; the last of a repeated name wins.
    ///
    /// Parsed here rather than through `URLComponents`, whose `percentEncodedQuery` setter traps on
    /// any character a URL may not hold (a raw space, `<`, `"`), which any client can send
    /// (one unauthenticated `POST /console/login` killed the edge). Hummingbird's
    /// `URLEncodedFormDecoder` decodes into `Decodable` types; the console reads loose fields. A
    /// `+` is a space; a bad `%` escape leaves the text as it came. The text is already bounded
    /// (the body by `max-body-bytes`, the query by the HTTP server).
    static func fields(urlEncoded text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            fields[formDecoded(parts[0])] = parts.count > 1 ? formDecoded(parts[1]) : ""
        }
        return fields
    }

    /// One name or value of a form: `+` as a space, then `%XX` escapes.
    private static func formDecoded(_ text: Substring) -> String {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }

    /// The most parts a form may have: the largest console form has a dozen fields.
    static let maxParts = 64

    /// Every part of a `multipart/form-data` body (a file's part has its Content-Type header),
    /// the body at most `max-content-bytes` plus room for the form's other fields.
    static func multipart(_ request: Request, _ config: EdgeConfig) async throws -> [Multipart.Part] {
        guard let boundary = Multipart.boundary(contentType: request.headers.value(.contentType) ?? "") else {
            throw EdgeError(.badRequest, "multipart/form-data without a boundary")
        }
        guard boundary.utf8.count <= Multipart.maxBoundaryBytes else {
            throw EdgeError(.badRequest, "a multipart boundary is at most \(Multipart.maxBoundaryBytes) characters")
        }
        let body = try await EdgeHTTP.collect(request, upTo: config.maxContentBytes + 64 * 1024)
        let parts = Multipart.parts([UInt8](body), boundary: boundary)
        guard parts.count <= maxParts else {
            throw EdgeError(.badRequest, "a form has at most \(maxParts) parts")
        }
        return parts
    }

    // MARK: small helpers

    /// 192 random bits, cookie- and form-safe.
    static func randomToken() -> String {
        base64URL(Data(SecureRandom.bytes(24)))
    }

    /// Base64url without padding (RFC 4648 §5).
    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Equal strings, in a time that does not depend on where they first differ.
    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        var difference: UInt8 = 0
        for index in x.indices { difference |= x[index] ^ y[index] }
        return difference == 0
    }

    /// "2026-11-24 09:32:12Z".
    static func time(_ unixMs: Int64) -> String {
        guard unixMs > 0 else { return "" }
        return Date(timeIntervalSince1970: Double(unixMs) / 1000).ISO8601Format().replacingOccurrences(
            of: "T", with: " ")
    }

    /// A body as indented JSON when it is JSON, else as text (WNS XML, raw bytes).
    static func pretty(_ body: [UInt8]) -> String {
        if let object = try? JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed]),
            let data = try? jsonData(object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        {
            return String(decoding: data, as: UTF8.self)
        }
        return String(decoding: body, as: UTF8.self)
    }
}
