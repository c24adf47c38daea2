import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldRPC
import Hummingbird
import Logging
import NIOCore

/// The HTTP pieces every group of the edge's routes shares: bodies read within a limit, JSON
/// answers, the checks on text that crosses into protobuf-c.
package enum EdgeHTTP {
    /// The request's Authorization value: 401 when it is missing, or malformed by a NUL (it crosses
    /// into protobuf-c as a C string), never a 400.
    static func authorization(_ request: Request, missing: String = "missing Authorization header") throws -> String {
        guard let header = request.headers.value(.authorization), !header.isEmpty else {
            throw EdgeError.unauthorized(missing)
        }
        guard !containsNUL(header) else { throw EdgeError.unauthorized("malformed Authorization header") }
        return header
    }

    /// The whole body, or 413 with a JSON error when it is larger than `limit`.
    static func collect(_ request: Request, upTo limit: Int) async throws -> Data {
        let tooLarge = EdgeError(.contentTooLarge, "the request body is larger than the limit of \(limit) bytes")
        if let declared = request.headers.value(.contentLength).flatMap(Int.init), declared > limit { throw tooLarge }
        do {
            return Data(buffer: try await request.body.collect(upTo: limit))
        } catch is NIOTooManyBytesError {
            throw tooLarge
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw tooLarge
        } catch {
            // The one place a body is read: a client that half-closes before sending Content-Length
            // bytes, a broken chunked encoding or a reset is the client's fault, never a 500.
            throw EdgeError(.badRequest, "the request body could not be read in full (it ended early or was malformed)")
        }
    }

    /// The message of a notify-users body: a JSON string. The tutorial's Android client wraps the
    /// text in quotes without escaping it, so a quoted body that is not valid JSON is taken as is.
    package static func messageText(_ body: Data) throws -> String {
        if let text = try? JSONSerialization.jsonObject(with: body, options: .fragmentsAllowed) as? String {
            return text
        }
        let raw = String(decoding: body, as: UTF8.self)
        if raw.count >= 2, raw.hasPrefix("\""), raw.hasSuffix("\"") { return String(raw.dropFirst().dropLast()) }
        throw EdgeError(.badRequest, #"the body must be the message as a JSON string, e.g. "Hello""#)
    }

    /// Strings cross into protobuf-c as C strings: refuse a NUL instead of letting it cut the text.
    static func text(_ value: String, _ name: String) throws -> String {
        guard !containsNUL(value) else { throw EdgeError(.badRequest, "\(name) must not contain a NUL character") }
        return value
    }

    /// Whether `value` has a NUL byte: `memchr` over its bytes (a generic `contains` over the
    /// UTF-8 view took ~20 instructions a byte).
    static func containsNUL(_ value: String) -> Bool {
        value.utf8.withContiguousStorageIfAvailable { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else { return false }
            return memchr(base, 0, bytes.count) != nil
        } ?? value.utf8.contains(0)
    }

    static func outcomePath(_ notificationID: String) -> String { "/v1/notifications/\(notificationID)/outcome" }

    /// `value` as the JSON answer: sorted keys, slashes unescaped (as every Herald JSON body).
    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return json(String(decoding: try encoder.encode(value), as: UTF8.self), status: status)
    }

    static func json(_ text: String, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}

/// herald-auth's answers about Herald users (Basic or Bearer credentials), reused from the verdict
/// cache while they hold: what the tutorial, /v1 and console routes authenticate with.
struct UserAuthentication: Sendable {
    let auth: any AuthServiceClientProtocol
    /// auth's answers reused while they hold (see ``AuthVerdictCache``); `.off` over fakes.
    let verdicts: AuthVerdictCache
    /// The hub default's request rate, which the tutorial's and /v1's routes share (the console's
    /// are not counted: an operator must be able to raise a limit while it throttles).
    let rates: HubRateLimiter

    /// 404 unless content may be stored for `user` (an account in accounts mode): content for
    /// nobody would sit in the database until it expires.
    func requireUser(_ user: String, requestID: String) async throws {
        let answer = try await auth.userExists(UserExistsRequest(user: user), requestID: requestID)
        guard answer.exists else { throw EdgeError(.notFound, "user \(user) not found") }
    }

    /// The caller's user name (one auth RPC, unless a verdict is reused), and the request id to
    /// carry on every further call.
    func authenticate(_ request: Request, _ context: EdgeRequestContext) async throws -> (
        user: String, requestID: String
    ) {
        let principal = try await verdict(
            AuthenticateRequest(authorization: try EdgeHTTP.authorization(request), clientAddress: context.remoteIP),
            requestID: context.requestID)
        try admit(principal)
        return (principal.user, context.requestID)
    }

    /// The caller and their rights on the default hub (the tutorial's and /v1's), for the routes
    /// that send; the others ask for the user only, which spares herald-auth the grant's look-up.
    func principal(_ request: Request, _ context: EdgeRequestContext) async throws -> AuthenticateResponse {
        let principal = try await verdict(
            AuthenticateRequest(
                authorization: try EdgeHTTP.authorization(request), hub: Names.defaultHub,
                clientAddress: context.remoteIP),
            requestID: context.requestID)
        try admit(principal)
        return principal
    }

    /// 429 with `Retry-After` when the hub default's request rate is spent.
    private func admit(_ answer: AuthenticateResponse) throws {
        try rates.admit(
            hub: Names.defaultHub, rate: RequestRate(perSecond: answer.requestsPerSecond, burst: answer.requestBurst))
    }

    /// auth's answer to `request`: reused from ``verdicts`` while it holds, else asked for (and
    /// kept when auth allows). Every Authenticate the edge makes goes through here.
    func verdict(_ request: AuthenticateRequest, requestID: String) async throws -> AuthenticateResponse {
        switch verdicts.lookup(request) {
        case .hit(let answer):
            AuthVerdictCache.fromCache.increment()
            return answer
        case .miss(let key, let generation):
            let answer = try await auth.authenticate(request, requestID: requestID)
            AuthVerdictCache.fromAuth.increment()
            if let generation { verdicts.store(answer, key: key, generation: generation) }
            return answer
        }
    }

    /// 403 unless `principal` may send to `targetUser` (nil: a tag): their own devices always,
    /// anyone else's and any tag only with Send on the hub (`herald hubs grant default USER Send`).
    static func requireSend(_ principal: AuthenticateResponse, toUser targetUser: String?) throws {
        if let targetUser, targetUser == principal.user { return }
        guard principal.hubRights.contains(.send) else {
            throw EdgeError(
                .forbidden,
                targetUser.map {
                    "\(principal.user) may send to their own devices only; sending to \($0) needs the Send right on the hub"
                }
                    ?? "sending to a tag needs the Send right on the hub (herald hubs grant default \(principal.user) Send)"
            )
        }
    }
}

/// Content stored for a user and pushed by its id, the tutorial's secure and rich push and /v1's
/// uploads: the payload service stores, dispatch sends, and a refused send takes its content back.
struct ContentPush: Sendable {
    let payload: any PayloadServiceClientProtocol
    let dispatch: any DispatchServiceClientProtocol

    /// Stores a secure payload for `recipient` and pushes its id to their devices.
    func sendSecure(
        _ text: String, to recipient: String, from sender: String, ttlSeconds: Int64 = 0, hub: String = "",
        requestID: String
    ) async throws -> (payloadID: Int64, outcome: Outcome) {
        let stored = try await storePayload(
            StorePayloadRequest(
                recipient: recipient, kind: .secure, content: Array(text.utf8),
                contentType: "text/plain; charset=utf-8",
                ttlSeconds: ttlSeconds, sender: sender),
            requestID: requestID)
        let outcome = try await sendOrForget(
            SendRequest(
                targetUser: recipient, payloads: NativePayloads.secure(id: stored.id), hub: hub,
                principal: Principal(user: sender)),
            stored: stored.id, recipient: recipient, requestID: requestID)
        return (stored.id, outcome)
    }

    /// Stores rich content for `recipient` and pushes its id, message and type to their devices.
    func sendRich(
        _ content: [UInt8], contentType: String, message: String, richType: String, to recipient: String,
        from sender: String,
        ttlSeconds: Int64 = 0, hub: String = "", requestID: String
    ) async throws -> (payloadID: Int64, outcome: Outcome) {
        let stored = try await storePayload(
            StorePayloadRequest(
                recipient: recipient, kind: .rich, content: content, contentType: contentType, message: message,
                richType: richType, ttlSeconds: ttlSeconds, sender: sender),
            requestID: requestID)
        let outcome = try await sendOrForget(
            SendRequest(
                targetUser: recipient,
                payloads: NativePayloads.rich(id: stored.id, message: message, richType: richType),
                hub: hub, principal: Principal(user: sender)),
            stored: stored.id, recipient: recipient, requestID: requestID)
        return (stored.id, outcome)
    }

    /// Sends the push that carries stored content's id; when dispatch refuses it (too large, a bad
    /// argument…), deletes that content before answering, so a refused request leaves nothing a
    /// recipient could read later.
    ///
    /// Only a definite refusal deletes: after UNAVAILABLE, DEADLINE_EXCEEDED or CANCELLED the send
    /// may have been committed, and its push must still find its content (which expires anyway).
    func sendOrForget(_ request: SendRequest, stored id: Int64, recipient: String, requestID: String) async throws
        -> Outcome
    {
        do {
            return try await send(request, requestID: requestID)
        } catch let error as ServiceError
            where ![.unavailable, .deadlineExceeded, .cancelled, .unknown].contains(error.code)
        {
            do {
                _ = try await payload.deletePayload(
                    DeletePayloadRequest(id: id, recipient: recipient), requestID: requestID)
            } catch {
                // The content still expires; the log says which id was left behind.
                Logger(label: "herald.edge").warning(
                    "could not delete content of a refused send",
                    metadata: [
                        "herald.payload_id": "\(id)", "herald.request_id": "\(requestID)", "herald.error": "\(error)",
                    ])
            }
            throw error
        }
    }

    /// One Send call, and the outcome it answers.
    func send(_ request: SendRequest, requestID: String) async throws -> Outcome {
        guard let outcome = try await dispatch.send(request, requestID: requestID).outcome else {
            throw ServiceError(.internal, "dispatch answered Send without an outcome")
        }
        return outcome
    }

    /// One StorePayload call; the payload service's own size limit answers 413 like the edge's.
    private func storePayload(_ request: StorePayloadRequest, requestID: String) async throws -> StorePayloadResponse {
        do {
            return try await payload.storePayload(request, requestID: requestID)
        } catch let error as ServiceError where error.code == .resourceExhausted {
            throw EdgeError(.contentTooLarge, error.message)
        }
    }
}

/// A send's failed deliveries, one JSON object per line (NDJSON): `/v1/notifications/{id}/failures`
/// and NH's `PnsErrorDetailsUri`, `/{hub}/messages/{id}/failures`.
struct DeliveryFailures: Sendable {
    let dispatch: any DispatchServiceClientProtocol

    /// `GET /{hub}/messages/{id}/failures` and `GET /v1/notifications/{id}/failures`: every
    /// delivery of a send that failed for good, one JSON object per line (NDJSON), in outbox order:
    /// `{"attempts","handle","messageId","platform","reason","registrationId","state","status"}`.
    /// NH's telemetry points at it as `PnsErrorDetailsUri` (NH's own is a blob of the same facts).
    /// Whose send it is: the signed-in `requester`'s, or one on `hub` (dispatch refuses neither).
    func export(id: String, requester: String, hub: String, requestID: String) async throws
        -> Response
    {
        guard id.hasPrefix("n-"), id.utf8.count <= 64 else { throw EdgeError(.notFound, "no notification \(id)") }
        var out: [UInt8] = []
        var after: Int64 = 0
        while true {
            let page = try await dispatch.listDeliveries(
                ListDeliveriesRequest(
                    notificationID: id, requester: requester, afterSequence: after, limit: 1000, hub: hub,
                    failedOnly: true),
                requestID: requestID
            ).deliveries
            for delivery in page {
                let line: [String: Any] = [
                    "registrationId": delivery.registrationID, "platform": delivery.platform.name,
                    "handle": delivery.handle,
                    "state": delivery.state == .abandoned ? "Abandoned" : "Failed", "reason": delivery.reason,
                    "status": Int(delivery.lastStatus), "attempts": Int(delivery.attempts),
                    "messageId": delivery.messageID,
                ]
                out += try jsonData(line, options: [.sortedKeys, .withoutEscapingSlashes])
                out.append(UInt8(ascii: "\n"))
            }
            guard page.count == 1000, let last = page.last else { break }
            after = last.sequence
        }
        return Response(
            status: .ok, headers: [.contentType: "application/x-ndjson", .cacheControl: "no-store"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: out)))
    }
}
