import Foundation
public import HeraldProto
public import HeraldRPC
public import Hummingbird

/// The tutorial's REST API, each route translated into as few RPCs as it needs.
///
/// Contract: ../shared/docs/tutorial-contract.md. Every `api/*` route authenticates first (one
/// auth RPC), then makes at most two more calls.
public struct EdgeRoutes: Sendable {
    public let auth: RPCClient
    public let registration: RPCClient
    public let payload: RPCClient
    public let dispatch: RPCClient
    public let config: EdgeConfig

    /// The text a secure push stores, as in the tutorial.
    public static let secureText = "Secure confirmation."

    public init(auth: RPCClient, registration: RPCClient, payload: RPCClient, dispatch: RPCClient, config: EdgeConfig) {
        self.auth = auth
        self.registration = registration
        self.payload = payload
        self.dispatch = dispatch
        self.config = config
    }

    public func add<Context: RequestContext>(to router: Router<Context>) {
        router.add(middleware: EdgeErrorMiddleware<Context>())
        router.get("healthz") { _, _ in Self.json(#"{"status":"ok"}"#) }
        router.post("api/register") { request, _ in try await createRegistrationID(request) }
        router.put("api/register/:id") { request, context in
            try await upsertRegistration(request, id: context.parameters.require("id"))
        }
        router.delete("api/register/:id") { request, context in
            try await deleteRegistration(request, id: context.parameters.require("id"))
        }
        router.post("api/notifications") { request, _ in try await send(request) }
        router.get("api/notifications/:id") { request, context in
            try await fetchNotification(request, id: context.parameters.require("id"))
        }
    }

    // MARK: routes

    /// `POST api/register?handle=` → 200 with the id as a JSON string.
    func createRegistrationID(_ request: Request) async throws -> Response {
        let (user, requestID) = try await authenticate(request)
        let handle = request.uri.queryParameters.get("handle") ?? ""
        let answer = try await registration.call(
            RegistrationServiceMethods.createRegistrationId,
            CreateRegistrationIdRequest(owner: user, handle: try Self.text(handle, "handle")),
            requestID: requestID)
        return Self.json(try Self.jsonString(answer.registrationID))
    }

    /// `PUT api/register/{id}` with `{"Platform","Handle","Tags"}` → 200, or 410 when the id is gone.
    func upsertRegistration(_ request: Request, id: String) async throws -> Response {
        let (user, requestID) = try await authenticate(request)
        let body = try await request.body.collect(upTo: config.maxBodyBytes)
        let update = try RegistrationBody.parse(Data(buffer: body))
        do {
            _ = try await registration.call(
                RegistrationServiceMethods.upsertRegistration,
                UpsertRegistrationRequest(
                    owner: user, registrationID: try Self.text(id, "id"), platform: update.platform,
                    handle: try Self.text(update.handle, "Handle"), tags: try update.tags.map { try Self.text($0, "Tags") }),
                requestID: requestID)
        } catch let error as ServiceError where error.code == .notFound {
            throw EdgeError(.gone, "registration \(id) is gone; get a new id with POST api/register")
        }
        return Response(status: .ok)
    }

    /// `DELETE api/register/{id}` → 200, or 404 when unknown or someone else's.
    func deleteRegistration(_ request: Request, id: String) async throws -> Response {
        let (user, requestID) = try await authenticate(request)
        _ = try await registration.call(
            RegistrationServiceMethods.deleteRegistration,
            DeleteRegistrationRequest(owner: user, registrationID: try Self.text(id, "id")),
            requestID: requestID)
        return Response(status: .ok)
    }

    /// `POST api/notifications`: the profile's flow to the caller's own devices.
    func send(_ request: Request) async throws -> Response {
        let (user, requestID) = try await authenticate(request)
        if request.uri.queryParameters.get("pns") != nil || request.uri.queryParameters.get("to_tag") != nil {
            throw EdgeError(.notImplemented, "notify-users sends (pns, to_tag) are not available in this release")
        }
        switch config.profile {
        case .secure:
            let stored = try await payload.call(
                PayloadServiceMethods.storePayload,
                StorePayloadRequest(
                    recipient: user, kind: .secure, content: Array(Self.secureText.utf8),
                    contentType: "text/plain; charset=utf-8", sender: user),
                requestID: requestID)
            _ = try await dispatch.call(
                DispatchServiceMethods.send,
                SendRequest(targetUser: user, payloads: SecurePush.payloads(id: stored.id), sender: user),
                requestID: requestID)
            return Response(status: .ok)
        case .rich:
            throw EdgeError(.notImplemented, "the rich profile is not available in this release")
        }
    }

    /// `GET api/notifications/{id}`: the recipient's content; 404 for anyone else.
    func fetchNotification(_ request: Request, id: String) async throws -> Response {
        let (user, requestID) = try await authenticate(request)
        guard let number = Int64(id), number > 0 else { throw EdgeError(.notFound, "notification \(id) not found") }
        let stored = try await payload.call(
            PayloadServiceMethods.fetchPayload, FetchPayloadRequest(id: number, requester: user), requestID: requestID)
        switch stored.kind {
        case .secure:
            let body = SecureBody(Id: number, Payload: String(decoding: stored.content, as: UTF8.self), Read: stored.read)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return Self.json(String(decoding: try encoder.encode(body), as: UTF8.self))
        default:
            return Response(
                status: .ok, headers: [.contentType: stored.contentType],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: stored.content)))
        }
    }

    // MARK: helpers

    /// One auth RPC: the caller's user name, and the request id to carry on every further call.
    private func authenticate(_ request: Request) async throws -> (user: String, requestID: String) {
        let requestID = EdgeErrorMiddleware<BasicRequestContext>.requestID(request)
        guard let header = request.headers[.authorization], !header.isEmpty else {
            throw EdgeError.unauthorized("missing Authorization header")
        }
        let principal = try await auth.call(
            AuthServiceMethods.authenticate, AuthenticateRequest(authorization: header), requestID: requestID)
        return (principal.user, requestID)
    }

    /// Strings cross into protobuf-c as C strings: refuse a NUL instead of letting it cut the text.
    private static func text(_ value: String, _ name: String) throws -> String {
        guard !value.utf8.contains(0) else { throw EdgeError(.badRequest, "\(name) must not contain a NUL character") }
        return value
    }

    private static func jsonString(_ value: String) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed, .withoutEscapingSlashes]), as: UTF8.self)
    }

    static func json(_ text: String) -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}

/// The secure-push answer, property names as the tutorial's ASP.NET backend wrote them.
struct SecureBody: Encodable {
    let Id: Int64
    let Payload: String
    let Read: Bool
}

/// The native payloads of a secure push: only the id crosses Apple, Google or Microsoft.
public enum SecurePush {
    public static func payloads(id: Int64) -> [NativePayload] {
        [
            NativePayload(
                platform: .apns, body: Array(#"{"aps":{"content-available":1},"secureId":"\#(id)"}"#.utf8),
                pushType: "background", priority: 5),
            NativePayload(platform: .fcm, body: Array(#"{"data":{"secureId":"\#(id)"}}"#.utf8)),
            NativePayload(
                platform: .wns, body: Array("\(id)".utf8), pushType: "wns/raw", contentType: "application/octet-stream"),
        ]
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
            throw EdgeError(.badRequest, "Platform is required: one of apns, fcm (or gcm, fcmv1), wns")
        }
        guard let handle = fields["handle"] as? String, !handle.isEmpty else {
            throw EdgeError(.badRequest, "Handle is required")
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

    static func platform(_ name: String) throws -> Platform {
        switch name.lowercased() {
        case "apns": return .apns
        case "fcm", "gcm", "fcmv1": return .fcm
        case "wns": return .wns
        case "mpns":
            throw EdgeError(.badRequest, "platform mpns is retired (Microsoft ended MPNS); use wns")
        default:
            throw EdgeError(.badRequest, "unknown platform \"\(name.prefix(40))\"; accepted: apns, fcm (or gcm, fcmv1), wns")
        }
    }
}
