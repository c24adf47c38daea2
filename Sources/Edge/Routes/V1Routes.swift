import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import Hummingbird
import NotificationHubs

/// Herald's own API beside the tutorial's: uploads with real content, outcomes, bearer tokens.
///
/// JSON here is camelCase (the `api/*` routes keep the tutorial's PascalCase); errors are the same
/// `{"error","message"}` bodies.
struct V1Routes: Sendable {
    let users: UserAuthentication
    let auth: any AuthServiceClientProtocol
    let content: ContentPush
    let dispatch: any DispatchServiceClientProtocol
    let failures: DeliveryFailures
    let config: EdgeConfig

    func add(to router: Router<EdgeRequestContext>) {
        router.post("v1/notifications") { request, context in try await upload(request, context) }
        router.get("v1/notifications/:id/failures") { request, context in
            let (user, requestID) = try await users.authenticate(request, context)
            return try await failures.export(
                id: try EdgeHTTP.text(try context.parameters.require("id"), "id"), requester: user, hub: "",
                requestID: requestID
            )
        }
        router.get("v1/notifications/:id/outcome") { request, context in
            try await outcome(request, context, id: context.parameters.require("id"))
        }
        router.post("v1/auth/token") { request, context in try await issueToken(request, context) }
        router.delete("v1/auth/token") { request, context in try await revokeToken(request, context) }
    }

    /// `POST /v1/notifications?kind=rich|secure|alert&to_user=…|to_tag=…[&message=…&rich_type=…&ttl_seconds=…]`
    ///
    /// - `rich`: the body is the content (any type; `Content-Type` is stored and served back),
    ///   stored for `to_user`, who gets a silent push with its id, `message` and `rich_type`
    ///   (default `img` for images, `file` otherwise).
    /// - `secure`: the body is the secret text, stored for `to_user`, who gets only its id.
    /// - `alert`: the body (UTF-8 text) is shown as is, to `to_user` or every device with `to_tag`.
    ///
    /// 202 with `{"notificationId","payloadId"?,"state","outcome"}` and `Location` of the outcome.
    /// Content over `max-content-bytes` is 413 and nothing is stored.
    func upload(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let principal = try await users.principal(request, context)
        let (user, requestID) = (principal.user, context.requestID)
        let query = request.uri.queryParameters
        let kind = query.get("kind") ?? ""
        let toUser = query.get("to_user") ?? ""
        let toTag = query.get("to_tag") ?? ""
        guard toUser.isEmpty != toTag.isEmpty else {
            throw EdgeError(.badRequest, "give exactly one of to_user and to_tag")
        }
        if !toUser.isEmpty, !Names.isValidUserName(toUser) {
            throw EdgeError(.badRequest, "to_user must be a user name: 1 to 64 characters of A-Z a-z 0-9 _ @ # . -")
        }
        if !toTag.isEmpty {
            // A tag or a tag expression (a && (b || !c)); the error names the position.
            _ = try TagExpression.validated(toTag, field: "to_tag")
        }
        var ttl: Int64 = 0
        if let text = query.get("ttl_seconds") {
            guard let value = Names.positiveInteger(text), value <= ContentLimits.maxTTLSeconds else {
                throw EdgeError(
                    .badRequest, "ttl_seconds must be an integer from 1 to \(ContentLimits.maxTTLSeconds) (one year)")
            }
            ttl = value
        }
        let message = try EdgeHTTP.text(query.get("message") ?? "", "message")
        try UserAuthentication.requireSend(principal, toUser: toUser.isEmpty ? nil : toUser)

        let payloadID: Int64?
        let outcome: Outcome
        switch kind {
        case "rich", "secure":
            guard !toUser.isEmpty else {
                throw EdgeError(
                    .badRequest,
                    "\(kind) content is readable by its recipient only: give to_user (to_tag is for kind=alert)")
            }
            let body = try await EdgeHTTP.collect(request, upTo: config.maxContentBytes)
            guard !body.isEmpty else { throw EdgeError(.badRequest, "the body is the content to send; it is empty") }
            try await users.requireUser(toUser, requestID: requestID)
            if kind == "rich" {
                let contentType = request.headers.value(.contentType) ?? "application/octet-stream"
                let richType = try EdgeHTTP.text(
                    query.get("rich_type") ?? NativePayloads.richType(contentType: contentType), "rich_type")
                (payloadID, outcome) = try await content.sendRich(
                    [UInt8](body), contentType: try EdgeHTTP.text(contentType, "Content-Type"), message: message,
                    richType: richType,
                    to: toUser, from: user, ttlSeconds: ttl, requestID: requestID)
            } else {
                guard let text = String(data: body, encoding: .utf8) else {
                    throw EdgeError(.badRequest, "secure content must be UTF-8 text")
                }
                (payloadID, outcome) = try await content.sendSecure(
                    try EdgeHTTP.text(text, "body"), to: toUser, from: user, ttlSeconds: ttl, requestID: requestID)
            }
        case "alert":
            let body = try await EdgeHTTP.collect(request, upTo: config.maxBodyBytes)
            guard let text = String(data: body, encoding: .utf8), !text.isEmpty else {
                throw EdgeError(.badRequest, "the body is the alert text (UTF-8); it is empty")
            }
            payloadID = nil
            outcome = try await content.send(
                SendRequest(
                    targetUser: toUser, targetTag: toTag,
                    payloads: NativePayloads.alert(try EdgeHTTP.text(text, "body")),
                    principal: Principal(user: user)),
                requestID: requestID)
        default:
            throw EdgeError(.badRequest, "kind must be rich, secure or alert")
        }
        var response = try EdgeHTTP.json(
            AcceptedBody(
                notificationId: outcome.notificationID, payloadId: payloadID, state: OutcomeBody.state(outcome.state),
                outcome: EdgeHTTP.outcomePath(outcome.notificationID)),
            status: .accepted)
        response.headers[.location] = EdgeHTTP.outcomePath(outcome.notificationID)
        return response
    }

    /// `GET /v1/notifications/{id}/outcome`: where a send stands; its sender only (404 for others).
    func outcome(_ request: Request, _ context: EdgeRequestContext, id: String) async throws -> Response {
        let (user, requestID) = try await users.authenticate(request, context)
        let outcome = try await dispatch.getOutcome(
            GetOutcomeRequest(notificationID: try EdgeHTTP.text(id, "id"), requester: user),
            requestID: requestID)
        return try EdgeHTTP.json(OutcomeBody(outcome))
    }

    /// `POST /v1/auth/token` with Basic credentials: `{"access_token","token_type":"Bearer","expires_in","user"}`
    /// (OAuth 2.0's names, RFC 6749 §5.1).
    func issueToken(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let requestID = context.requestID
        let header = try EdgeHTTP.authorization(
            request, missing: "missing Authorization header: send Basic credentials")
        let issued = try await auth.issueToken(
            IssueTokenRequest(authorization: header, clientAddress: context.remoteIP), requestID: requestID)
        let expiresIn = max(0, (issued.expiresAtUnixMs - unixMillis()) / 1000)
        var response = try EdgeHTTP.json(TokenBody(accessToken: issued.token, expiresIn: expiresIn, user: issued.user))
        response.headers[.cacheControl] = "no-store"
        return response
    }

    /// `DELETE /v1/auth/token` with `Authorization: Bearer <token>`: revokes that token. 204.
    /// Never refused for the hub default's request rate: a leaked token must be revocable while
    /// the rate is spent (by whoever holds the token, perhaps).
    func revokeToken(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let requestID = context.requestID
        let header = try EdgeHTTP.authorization(request)
        _ = try await users.verdict(
            AuthenticateRequest(authorization: header, clientAddress: context.remoteIP), requestID: requestID)
        guard header.lowercased().hasPrefix("bearer ") else {
            throw EdgeError(.badRequest, "send the token to revoke as Authorization: Bearer <token>")
        }
        let token = String(header.dropFirst("bearer ".count)).trimmingCharacters(in: .whitespaces)
        _ = try await auth.revokeToken(RevokeTokenRequest(token: token), requestID: requestID)
        return Response(status: .noContent)
    }
}

/// `202` of `POST /v1/notifications`.
struct AcceptedBody: Encodable {
    var notificationId: String
    /// The stored content's id (rich and secure); left out for alerts.
    var payloadId: Int64?
    var state: String
    /// Path of the outcome resource.
    var outcome: String
}

/// `GET /v1/notifications/{id}/outcome`, with Notification Hubs' state names.
struct OutcomeBody: Encodable {
    struct PlatformCounts: Encodable {
        var platform: String
        var success: Int64
        var failure: Int64
        var pending: Int64
        /// Failures by reason (the provider's, e.g. `BadDeviceToken`).
        var failures: [String: Int64]
        var removedHandles: Int64
        var retries: Int64
    }

    var notificationId: String
    var state: String
    var createdAtUnixMs: Int64
    /// Left out (nil) until a worker takes the first delivery.
    var startedAtUnixMs: Int64?
    /// Left out (nil) until the send is over.
    var finishedAtUnixMs: Int64?
    var platforms: [PlatformCounts]

    init(_ outcome: Outcome) {
        notificationId = outcome.notificationID
        state = Self.state(outcome.state)
        startedAtUnixMs = outcome.startedAtUnixMs > 0 ? outcome.startedAtUnixMs : nil
        finishedAtUnixMs = outcome.finishedAtUnixMs > 0 ? outcome.finishedAtUnixMs : nil
        createdAtUnixMs = outcome.createdAtUnixMs
        platforms = outcome.platforms.map {
            PlatformCounts(
                platform: $0.platform.name, success: $0.success, failure: $0.failure, pending: $0.pending,
                failures: Dictionary($0.failures.map { ($0.reason, $0.count) }, uniquingKeysWith: +),
                removedHandles: $0.removedHandles, retries: $0.retries)
        }
    }

    static func state(_ state: OutcomeState) -> String { NHTelemetry.state(state) }
}

/// `POST /v1/auth/token`: OAuth 2.0's field names (RFC 6749 §5.1).
struct TokenBody: Encodable {
    var accessToken: String
    var tokenType = "Bearer"
    var expiresIn: Int64
    var user: String

    enum CodingKeys: String, CodingKey {
        case accessToken = "access_token"
        case tokenType = "token_type"
        case expiresIn = "expires_in"
        case user
    }
}
