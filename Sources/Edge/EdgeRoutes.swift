import Foundation
public import HTTPTypes
public import HeraldModel
public import HeraldProto
public import HeraldRPC
public import HeraldService
public import Hummingbird
import Logging
import NIOCore

/// The tutorial's REST API, each route translated into as few RPCs as it needs.
///
/// The routes, bodies and status codes are those of Azure Notification Hubs' "Notify users", "Rich
/// push" and "Secure push" tutorials (docs/openapi.yaml says each one). Every `api/*` route
/// authenticates first (one auth RPC, unless ``verdicts`` still holds auth's answer), then makes
/// at most two more calls.
public struct EdgeRoutes: Sendable {
    public let auth: any AuthServiceClientProtocol
    public let registration: any RegistrationServiceClientProtocol
    public let payload: any PayloadServiceClientProtocol
    public let dispatch: any DispatchServiceClientProtocol
    /// grpc.health.v1 of each service, by name, for `/readyz`.
    public let health: [String: any HealthClientProtocol]
    public let config: EdgeConfig
    /// auth's answers reused while they hold (see ``AuthVerdictCache``); `.off` over fakes.
    public let verdicts: AuthVerdictCache

    /// The text a secure push stores, as in the tutorial.
    public static let secureText = "Secure confirmation."

    /// Over any clients: the services' own in production, fakes in the route tests.
    public init(
        auth: any AuthServiceClientProtocol, registration: any RegistrationServiceClientProtocol,
        payload: any PayloadServiceClientProtocol, dispatch: any DispatchServiceClientProtocol,
        health: [String: any HealthClientProtocol], config: EdgeConfig, verdicts: AuthVerdictCache = .off
    ) {
        self.auth = auth
        self.registration = registration
        self.payload = payload
        self.dispatch = dispatch
        self.health = health
        self.config = config
        self.verdicts = verdicts
    }

    /// Over the connections to the four services.
    public init(
        auth: RPCClient, registration: RPCClient, payload: RPCClient, dispatch: RPCClient, config: EdgeConfig,
        verdicts: AuthVerdictCache = .off
    ) {
        self.init(
            auth: AuthServiceClient(auth), registration: RegistrationServiceClient(registration),
            payload: PayloadServiceClient(payload), dispatch: DispatchServiceClient(dispatch),
            health: [
                ServiceName.auth.rawValue: HealthClient(auth),
                ServiceName.registration.rawValue: HealthClient(registration),
                ServiceName.payload.rawValue: HealthClient(payload),
                ServiceName.dispatch.rawValue: HealthClient(dispatch),
            ],
            config: config, verdicts: verdicts)
    }

    public func add(to router: Router<EdgeRequestContext>) {
        router.add(middleware: EdgeErrorMiddleware())
        router.get("healthz") { _, _ in Self.json(#"{"status":"ok"}"#) }
        router.get("readyz") { _, _ in try await readiness() }
        router.get("openapi.json") { _, _ in Self.json(OpenAPIDocument.json) }
        router.get("metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: HeraldMetrics.contentType],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: HeraldMetrics.exposition())))
        }
        router.post("api/register") { request, context in try await createRegistrationID(request, context) }
        router.put("api/register/:id") { request, context in
            try await upsertRegistration(request, context, id: context.parameters.require("id"))
        }
        router.delete("api/register/:id") { request, context in
            try await deleteRegistration(request, context, id: context.parameters.require("id"))
        }
        router.post("api/notifications") { request, context in try await send(request, context) }
        router.get("api/notifications/:id") { request, context in
            try await fetchNotification(request, context, id: context.parameters.require("id"))
        }
        addV1Routes(to: router)
        addTestRoutes(to: router)
        addNotificationHubsRoutes(to: router)
        addNotificationHubsRegistrationRoutes(to: router)
        addConsoleRoutes(to: router)
    }

    /// `GET /readyz`: 200 when every service the edge calls answers SERVING on grpc.health.v1,
    /// else 503; the body names each service's status either way.
    func readiness() async throws -> Response {
        let statuses = await withTaskGroup(of: (String, String).self) { group in
            for (name, client) in health {
                group.addTask {
                    do {
                        let answer = try await client.check(HealthCheckRequest(service: ""), timeout: .seconds(1))
                        return (name, answer.status == .serving ? "SERVING" : "NOT_SERVING")
                    } catch {
                        return (name, "UNREACHABLE")
                    }
                }
            }
            return await group.reduce(into: [String: String]()) { $0[$1.0] = $1.1 }
        }
        let ready = statuses.values.allSatisfy { $0 == "SERVING" }
        return try Self.json(
            ReadinessBody(status: ready ? "ready" : "not ready", services: statuses),
            status: ready ? .ok : .serviceUnavailable)
    }

    // MARK: tutorial routes

    /// `POST api/register?handle=` → 200 with the id as a JSON string.
    func createRegistrationID(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let (user, requestID) = try await authenticate(request, context)
        let handle = request.uri.queryParameters.get("handle") ?? ""
        let answer = try await registration.createRegistrationId(
            CreateRegistrationIdRequest(owner: user, handle: try Self.text(handle, "handle")),
            requestID: requestID)
        return Self.json(NativePayloads.jsonString(answer.registrationID))
    }

    /// `PUT api/register/{id}` with `{"Platform","Handle","Tags"}` → 200, or 410 when the id is gone.
    func upsertRegistration(_ request: Request, _ context: EdgeRequestContext, id: String) async throws -> Response {
        let (user, requestID) = try await authenticate(request, context)
        let body = try await collect(request, upTo: config.maxBodyBytes)
        let update = try RegistrationBody.parse(body)
        do {
            _ = try await registration.upsertRegistration(
                UpsertRegistrationRequest(
                    owner: user, registrationID: try Self.text(id, "id"), platform: update.platform,
                    handle: try Self.text(update.handle, "Handle"),
                    tags: try update.tags.map { try Self.text($0, "Tags") }),
                requestID: requestID)
        } catch let error as ServiceError where error.code == .notFound {
            throw EdgeError(.gone, "registration \(id) is gone; get a new id with POST api/register")
        }
        return Response(status: .ok)
    }

    /// `DELETE api/register/{id}` → 200, or 404 when unknown or someone else's.
    func deleteRegistration(_ request: Request, _ context: EdgeRequestContext, id: String) async throws -> Response {
        let (user, requestID) = try await authenticate(request, context)
        _ = try await registration.deleteRegistration(
            DeleteRegistrationRequest(owner: user, registrationID: try Self.text(id, "id")),
            requestID: requestID)
        return Response(status: .ok)
    }

    /// `POST api/notifications`: with `pns` and `to_tag`, "Notify users"; without, the profile's
    /// flow (secure or rich) to the caller's own devices.
    func send(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let principal = try await principal(request, context)
        let (user, requestID) = (principal.user, context.requestID)
        let query = request.uri.queryParameters
        if query.get("pns") != nil || query.get("to_tag") != nil {
            return try await notifyUser(request, principal: principal, requestID: requestID)
        }
        switch config.profile {
        case .secure:
            _ = try await sendSecure(Self.secureText, to: user, from: user, requestID: requestID)
        case .rich:
            _ = try await sendRich(
                config.richImage, contentType: config.richImageType, message: config.richMessage, richType: "img",
                to: user, from: user, requestID: requestID)
        }
        return Response(status: .ok)
    }

    /// `POST api/notifications?pns=&to_tag=` with the message as a JSON string: "From <sender>:
    /// <message>" to every device of user `to_tag` on platform `pns`. 200 with `Location` naming the
    /// outcome, also when the user has no such device (the outcome says NoTargetFound).
    func notifyUser(_ request: Request, principal: AuthenticateResponse, requestID: String) async throws -> Response {
        let sender = principal.user
        let query = request.uri.queryParameters
        guard let pns = query.get("pns"), !pns.isEmpty else {
            throw EdgeError(.badRequest, "pns is required with to_tag: one of apns, fcm (or gcm, fcmv1), wns, browser")
        }
        guard let target = query.get("to_tag"), !target.isEmpty else {
            throw EdgeError(.badRequest, "to_tag is required: the user name to notify")
        }
        let platform = try RegistrationBody.platform(pns, field: "pns")
        guard Names.isValidUserName(target) else {
            throw EdgeError(.badRequest, "to_tag must be a user name: 1 to 64 characters of A-Z a-z 0-9 _ @ # . -")
        }
        try Self.requireSend(principal, toUser: target)
        let message = try Self.messageText(try await collect(request, upTo: config.maxBodyBytes))
        let outcome = try await send(
            SendRequest(
                targetUser: target,
                payloads: NativePayloads.alert(
                    try Self.text("From \(sender): \(message)", "message"), platforms: [platform]),
                sender: sender),
            requestID: requestID)
        var response = Response(status: .ok)
        response.headers[.location] = Self.outcomePath(outcome.notificationID)
        return response
    }

    /// `GET api/notifications/{id}`: the recipient's content; 404 for anyone else.
    func fetchNotification(_ request: Request, _ context: EdgeRequestContext, id: String) async throws -> Response {
        let (user, requestID) = try await authenticate(request, context)
        guard let number = Names.positiveInteger(id) else {
            throw EdgeError(.notFound, "notification \(id.prefix(40)) not found")
        }
        let stored = try await payload.fetchPayload(
            FetchPayloadRequest(id: number, requester: user), requestID: requestID)
        switch stored.kind {
        case .secure:
            let body = SecureBody(
                Id: number, Payload: String(decoding: stored.content, as: UTF8.self), Read: stored.read)
            var response = Self.json(body.json)
            response.headers[.cacheControl] = "no-store"
            return response
        default:
            return Response(
                status: .ok, headers: Self.contentHeaders(stored.contentType),
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: stored.content)))
        }
    }

    /// Content types a browser may show inline: raster images, audio and video. Anything else
    /// (HTML, SVG, scripts, PDFs…) is served as a download, so uploaded content can never run as a
    /// page of Herald's origin.
    static func isInlineSafe(_ contentType: String) -> Bool {
        let type =
            contentType.split(separator: ";", maxSplits: 1).first.map {
                $0.trimmingCharacters(in: .whitespaces).lowercased()
            } ?? ""
        return ["image/png", "image/jpeg", "image/gif", "image/webp", "image/avif"].contains(type)
            || (type.hasPrefix("audio/") || type.hasPrefix("video/")) && !type.contains("xml")
    }

    /// Headers of stored rich content: its own type, never sniffed, sandboxed, and a download
    /// unless it is an image, a sound or a video.
    static func contentHeaders(_ contentType: String) -> HTTPFields {
        var headers: HTTPFields = [
            .contentType: contentType, .cacheControl: "private, no-store", .xContentTypeOptions: "nosniff",
            .contentSecurityPolicy: "default-src 'none'; sandbox",
        ]
        if !isInlineSafe(contentType) { headers[.contentDisposition] = "attachment" }
        return headers
    }

    // MARK: flows shared by the tutorial and /v1 routes

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
                targetUser: recipient, payloads: NativePayloads.secure(id: stored.id), sender: sender, hub: hub),
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
                sender: sender, hub: hub),
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

    // MARK: helpers

    /// The caller's user name (one auth RPC, unless a verdict is reused), and the request id to
    /// carry on every further call.
    func authenticate(_ request: Request, _ context: EdgeRequestContext) async throws -> (
        user: String, requestID: String
    ) {
        let principal = try await verdict(
            AuthenticateRequest(authorization: try Self.authorization(request), clientAddress: context.remoteIP),
            requestID: context.requestID)
        return (principal.user, context.requestID)
    }

    /// The caller and their rights on the default hub (the tutorial's and /v1's), for the routes
    /// that send; the others ask for the user only, which spares herald-auth a read.
    func principal(_ request: Request, _ context: EdgeRequestContext) async throws -> AuthenticateResponse {
        try await verdict(
            AuthenticateRequest(
                authorization: try Self.authorization(request), hub: Names.defaultHub, clientAddress: context.remoteIP),
            requestID: context.requestID)
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
        guard HubRights(granted: principal.rights).contains(.send) else {
            throw EdgeError(
                .forbidden,
                targetUser == nil
                    ? "sending to a tag needs the Send right on the hub (herald hubs grant default \(principal.user) Send)"
                    : "\(principal.user) may send to their own devices only; sending to \(targetUser!) needs the Send right on the hub"
            )
        }
    }

    /// The request's Authorization value: 401 when it is missing, or malformed by a NUL (it crosses
    /// into protobuf-c as a C string), never a 400.
    static func authorization(_ request: Request, missing: String = "missing Authorization header") throws -> String {
        guard let header = request.headers[.authorization], !header.isEmpty else {
            throw EdgeError.unauthorized(missing)
        }
        guard !header.utf8.contains(0) else { throw EdgeError.unauthorized("malformed Authorization header") }
        return header
    }

    /// The whole body, or 413 with a JSON error when it is larger than `limit`.
    func collect(_ request: Request, upTo limit: Int) async throws -> Data {
        let tooLarge = EdgeError(.contentTooLarge, "the request body is larger than the limit of \(limit) bytes")
        if let declared = request.headers[.contentLength].flatMap(Int.init), declared > limit { throw tooLarge }
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
    static func messageText(_ body: Data) throws -> String {
        if let text = try? JSONSerialization.jsonObject(with: body, options: .fragmentsAllowed) as? String {
            return text
        }
        let raw = String(decoding: body, as: UTF8.self)
        if raw.count >= 2, raw.hasPrefix("\""), raw.hasSuffix("\"") { return String(raw.dropFirst().dropLast()) }
        throw EdgeError(.badRequest, #"the body must be the message as a JSON string, e.g. "Hello""#)
    }

    /// Strings cross into protobuf-c as C strings: refuse a NUL instead of letting it cut the text.
    static func text(_ value: String, _ name: String) throws -> String {
        guard !value.utf8.contains(0) else { throw EdgeError(.badRequest, "\(name) must not contain a NUL character") }
        return value
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

/// `GET /readyz`: each service's grpc.health.v1 status.
struct ReadinessBody: Encodable {
    var status: String
    var services: [String: String]
}

/// The secure-push answer, property names as the tutorial's ASP.NET backend wrote them.
struct SecureBody: Encodable {
    let Id: Int64
    let Payload: String
    let Read: Bool

    /// The body as `JSONEncoder` with sorted keys writes it, without the encoder: on the secure
    /// push's GET it was 6% of the edge's instructions (callgrind). A test holds the two equal.
    var json: String {
        #"{"Id":\#(Id),"Payload":\#(NativePayloads.jsonString(Payload)),"Read":\#(Read)}"#
    }
}

/// The body of `PUT api/register/{id}`. Property names match case-insensitively, as ASP.NET's
/// model binding did for the tutorial's clients.
struct RegistrationBody {
    var platform: Platform
    var handle: String
    var tags: [String]

    static func parse(_ data: Data) throws -> RegistrationBody {
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw EdgeError(.badRequest, #"body must be a JSON object {"Platform": …, "Handle": …, "Tags": […]}"#)
        }
        let fields = Dictionary(object.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        guard let platformName = fields["platform"] as? String else {
            throw EdgeError(.badRequest, "Platform is required: one of apns, fcm (or gcm, fcmv1), wns, browser")
        }
        let handle: String
        switch fields["handle"] {
        case let text as String where !text.isEmpty: handle = text
        case let subscription as [String: Any]:
            // A browser may send its PushSubscription as an object rather than a JSON string.
            handle = String(
                decoding: try JSONSerialization.data(withJSONObject: subscription, options: [.sortedKeys]),
                as: UTF8.self)
        default: throw EdgeError(.badRequest, "Handle is required")
        }
        var tags: [String] = []
        switch fields["tags"] {
        case nil, is NSNull: break
        case let list as [Any]:
            tags = try list.map { item in
                guard let tag = item as? String else { throw EdgeError(.badRequest, "Tags must be a list of strings") }
                return tag
            }
        default: throw EdgeError(.badRequest, "Tags must be a list of strings")
        }
        return RegistrationBody(platform: try platform(platformName), handle: handle, tags: tags)
    }

    /// A platform name as the tutorial's clients send it (`field` names it in errors).
    static func platform(_ name: String, field: String = "Platform") throws -> Platform {
        switch name.lowercased() {
        case "apns": return .apns
        case "fcm", "gcm", "fcmv1": return .fcm
        case "wns": return .wns
        case "browser", "webpush": return .browser
        case "mpns":
            throw EdgeError(.badRequest, "\(field) mpns is retired (Microsoft ended MPNS); use wns")
        default:
            throw EdgeError(
                .badRequest,
                "unknown \(field) \"\(name.prefix(40))\"; accepted: apns, fcm (or gcm, fcmv1), wns, browser")
        }
    }
}
