import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldRPC
import Hummingbird
import NIOCore

/// The tutorial's REST API, each route translated into as few RPCs as it needs.
///
/// The routes, bodies and status codes are those of Azure Notification Hubs' "Notify users", "Rich
/// push" and "Secure push" tutorials (docs/openapi.yaml says each one). Every `api/*` route
/// authenticates first (one auth RPC, unless auth's answer is still held), then makes at most two
/// more calls.
struct TutorialRoutes: Sendable {
    let users: UserAuthentication
    let registration: any RegistrationServiceClientProtocol
    let payload: any PayloadServiceClientProtocol
    let content: ContentPush
    let config: EdgeConfig

    func add(to router: Router<EdgeRequestContext>) {
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
    }

    /// `POST api/register?handle=` → 200 with the id as a JSON string.
    func createRegistrationID(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let (user, requestID) = try await users.authenticate(request, context)
        let handle = request.uri.queryParameters.get("handle") ?? ""
        let answer = try await registration.createRegistrationId(
            CreateRegistrationIdRequest(owner: user, handle: try EdgeHTTP.text(handle, "handle")),
            requestID: requestID)
        return EdgeHTTP.json(NativePayloads.jsonString(answer.registrationID))
    }

    /// `PUT api/register/{id}` with `{"Platform","Handle","Tags"}` → 200, or 410 when the id is gone.
    func upsertRegistration(_ request: Request, _ context: EdgeRequestContext, id: String) async throws -> Response {
        let (user, requestID) = try await users.authenticate(request, context)
        let body = try await EdgeHTTP.collect(request, upTo: config.maxBodyBytes)
        let update = try RegistrationBody.parse(body)
        do {
            _ = try await registration.upsertRegistration(
                UpsertRegistrationRequest(
                    owner: user, registrationID: try EdgeHTTP.text(id, "id"), platform: update.platform,
                    handle: try EdgeHTTP.text(update.handle, "Handle"),
                    tags: try update.tags.map { try EdgeHTTP.text($0, "Tags") }),
                requestID: requestID)
        } catch let error as ServiceError where error.code == .notFound {
            throw EdgeError(.gone, "registration \(id) is gone; get a new id with POST api/register")
        }
        return Response(status: .ok)
    }

    /// `DELETE api/register/{id}` → 200, or 404 when unknown or someone else's.
    func deleteRegistration(_ request: Request, _ context: EdgeRequestContext, id: String) async throws -> Response {
        let (user, requestID) = try await users.authenticate(request, context)
        _ = try await registration.deleteRegistration(
            DeleteRegistrationRequest(owner: user, registrationID: try EdgeHTTP.text(id, "id")),
            requestID: requestID)
        return Response(status: .ok)
    }

    /// `POST api/notifications`: with `pns` and `to_tag`, "Notify users"; without, the profile's
    /// flow (secure or rich) to the caller's own devices.
    func send(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let principal = try await users.principal(request, context)
        let (user, requestID) = (principal.user, context.requestID)
        let query = request.uri.queryParameters
        if query.get("pns") != nil || query.get("to_tag") != nil {
            return try await notifyUser(request, principal: principal, requestID: requestID)
        }
        switch config.profile {
        case .secure:
            _ = try await content.sendSecure(EdgeRoutes.secureText, to: user, from: user, requestID: requestID)
        case .rich:
            _ = try await content.sendRich(
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
        try UserAuthentication.requireSend(principal, toUser: target)
        let message = try EdgeHTTP.messageText(try await EdgeHTTP.collect(request, upTo: config.maxBodyBytes))
        let outcome = try await content.send(
            SendRequest(
                targetUser: target,
                payloads: NativePayloads.alert(
                    try EdgeHTTP.text("From \(sender): \(message)", "message"), platforms: [platform]),
                principal: Principal(user: sender)),
            requestID: requestID)
        var response = Response(status: .ok)
        response.headers[.location] = EdgeHTTP.outcomePath(outcome.notificationID)
        return response
    }

    /// `GET api/notifications/{id}`: the recipient's content; 404 for anyone else.
    func fetchNotification(_ request: Request, _ context: EdgeRequestContext, id: String) async throws -> Response {
        let (user, requestID) = try await users.authenticate(request, context)
        guard let number = Names.positiveInteger(id) else {
            throw EdgeError(.notFound, "notification \(id.prefix(40)) not found")
        }
        let stored = try await payload.fetchPayload(
            FetchPayloadRequest(id: number, requester: user), requestID: requestID)
        switch stored.kind {
        case .secure:
            let body = SecureBody(
                Id: number, Payload: String(decoding: stored.content, as: UTF8.self), Read: stored.read)
            var response = EdgeHTTP.json(body.json)
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
}
