import Foundation
import HTTPTypes
import HeraldClient
import HeraldModel
import HeraldProto
import HeraldService
import Hummingbird
import NIOCore
import NotificationHubs

/// NH's Registrations API on `/{hub}/registrations…` (docs/notification-hubs.md, "Registrations"):
/// what the .NET SDK's `CreateRegistrationIdAsync`, `CreateOrUpdateRegistrationAsync`,
/// `GetRegistrationsByChannelAsync`, `GetRegistrationsByTagAsync` and `DeleteRegistrationAsync`
/// call, with NH's Atom/XML bodies (``NHRegistrationXML``), ETags and continuation tokens.
/// Listen may create, replace, read and delete one registration and list those of one handle;
/// listing all of a hub's, or by tag, needs Manage.
extension NotificationHubsRoutes {
    func addRegistrationRoutes(to router: RouterGroup<EdgeRequestContext>) {
        // .NET writes `registrationids`, the REST docs `registrationIDs`.
        for spelling in ["registrationIDs", "registrationids"] {
            router.post(RouterPath(spelling)) { request, context in
                await nh(request, context) { try await createHubRegistrationID(request, context) }
            }
        }
        // NH's older device SDKs (WindowsAzure.Messaging) write `{hub}/Registrations/…`.
        for collection in ["registrations", "Registrations"] {
            router.post(RouterPath(collection)) { request, context in
                await nh(request, context) { try await writeRegistration(request, context, id: nil) }
            }
            router.put("\(collection)/:id") { request, context in
                await nh(request, context) {
                    try await writeRegistration(request, context, id: try context.parameters.require("id"))
                }
            }
            router.get("\(collection)/:id") { request, context in
                await nh(request, context) { try await getRegistration(request, context) }
            }
            router.delete("\(collection)/:id") { request, context in
                await nh(request, context) { try await deleteRegistration(request, context) }
            }
            router.get(RouterPath(collection)) { request, context in
                await nh(request, context) { try await listRegistrations(request, context, tag: nil) }
            }
        }
        router.get("tags/:tag/registrations") { request, context in
            await nh(request, context) {
                try await listRegistrations(request, context, tag: try context.parameters.require("tag"))
            }
        }
    }

    /// An id in NH's form (three numbers joined by hyphens), unguessable: 126 random bits.
    static func newRegistrationID() -> String {
        var generator = SystemRandomNumberGenerator()
        let a = generator.next() >> 1
        let b = generator.next() >> 1
        return "\(a)-\(b)-\(Int.random(in: 1...9, using: &generator))"
    }

    /// `POST /{hub}/registrationIDs`: 201 with the new id at the end of `Location`; nothing is
    /// stored until a PUT (NH keeps no state for it either).
    func createHubRegistrationID(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        try await authorizeSAS(request, context, needs: .listen)
        var response = Self.nhEmpty(.created)
        response.headers[.location] =
            "\(Self.origin(request))/\(Self.pathHub(request))/registrationids/\(Self.newRegistrationID())"
        return response
    }

    /// `POST /{hub}/registrations` (create, a new id) and `PUT /{hub}/registrations/{id}` (create
    /// or replace; with `If-Match`, only over that ETag: 412 otherwise). 200 with the stored entry.
    func writeRegistration(_ request: Request, _ context: EdgeRequestContext, id: String?) async throws -> Response {
        let (hub, answer) = try await authorizeSASAnswer(request, context, needs: .listen)
        var description = try NHRegistrationXML.parse(
            [UInt8](try await EdgeHTTP.collect(request, upTo: config.maxBodyBytes)))
        description.registrationID = id ?? Self.newRegistrationID()
        let stored = try await Self.preconditioned {
            try await registration.putHubRegistration(
                PutHubRegistrationRequest(
                    hub: hub, registration: description, ifMatch: try Self.ifMatch(request), createOnly: id == nil,
                    maxRegistrations: answer.maxInstallations,
                    trusted: answer.hubRights.contains(.manage)),
                requestID: context.requestID)
        }
        return Self.registrationEntry(stored.registration ?? HubRegistration(), request: request)
    }

    /// `GET /{hub}/registrations/{id}`: the entry with `ETag`, or 404.
    func getRegistration(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await authorizeSAS(request, context, needs: .listen)
        let answer = try await registration.getHubRegistration(
            GetHubRegistrationRequest(hub: hub, registrationID: try context.parameters.require("id")),
            requestID: context.requestID)
        return Self.registrationEntry(answer.registration ?? HubRegistration(), request: request)
    }

    /// `DELETE /{hub}/registrations/{id}` with `If-Match: *` or an ETag: 200 (what the .NET SDK
    /// expects), 404 when absent, 412 on a stale ETag.
    func deleteRegistration(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await authorizeSAS(request, context, needs: .listen)
        let ifMatch = try Self.ifMatch(request)
        _ = try await Self.preconditioned {
            try await registration.deleteHubRegistration(
                DeleteHubRegistrationRequest(
                    hub: hub, registrationID: try context.parameters.require("id"), ifMatch: ifMatch),
                requestID: context.requestID)
        }
        return Self.nhEmpty(.ok)
    }

    /// `GET /{hub}/registrations[?$filter=ChannelUri eq '…']` and `GET /{hub}/tags/{tag}/registrations`,
    /// with `$top` (1 to 1000; 100) and `continuationtoken`: an Atom feed, the next page's token in
    /// `x-ms-continuationtoken`. A hub's feed filtered by one handle needs Listen; the rest Manage.
    func listRegistrations(_ request: Request, _ context: EdgeRequestContext, tag: String?) async throws -> Response {
        let query = request.uri.queryParameters
        let handle = try query.get("$filter").map(Self.channelFilter)
        // A tag's feed is the tag's whole audience: Manage, with or without a filter (which
        // herald-registration refuses beside a tag anyway).
        let (hub, verdict) = try await authorizeSASAnswer(
            request, context, needs: handle == nil || tag != nil ? .manage : .listen)
        var limit: Int32 = 100
        if let top = query.get("$top") ?? query.get("top") {
            guard let value = Names.positiveInteger(top), value <= 1000 else {
                throw EdgeError(.badRequest, "$top must be 1 to 1000")
            }
            limit = Int32(clamping: value)
        }
        let token = query.get("continuationtoken") ?? query.get("ContinuationToken") ?? ""
        let answer = try await registration.listHubRegistrations(
            ListHubRegistrationsRequest(
                hub: hub, handle: handle ?? "", tag: tag ?? "", after: token, limit: limit,
                scope: Self.readScope(verdict.hubRights, handle: handle)),
            requestID: context.requestID)
        let base = "\(Self.origin(request))/\(Self.pathHub(request))/registrations/"
        let url = Self.origin(request) + (request.uri.string.hasPrefix("/") ? request.uri.string : "/")
        let xml = NHRegistrationXML.feed(answer.registrations, url: url, base: base, now: unixMillis())
        var response = Response(
            status: .ok, headers: [.contentType: NHRegistrationXML.feedContentType],
            body: ResponseBody(byteBuffer: ByteBuffer(string: xml)))
        if !answer.nextAfter.isEmpty {
            response.headers[.continuationToken] = answer.nextAfter
        }
        return response
    }

    /// The handle of `$filter`: `<Field> eq '<handle>'` with `''` for a quote. The .NET SDK writes
    /// `ChannelUri` whatever the platform; the REST docs name each platform's field; Java's
    /// URLEncoder turns the spaces into `+`, and NH's older device SDKs write `channeluri+eq+'…'`.
    static func channelFilter(_ filter: String) throws -> String {
        // By hand rather than with a Regex: this runs on every by-channel query (the AppBackend
        // makes one per registration), and Swift's Regex cost more than the rest of the request.
        let refused = EdgeError(
            .badRequest, "$filter is ChannelUri eq '<handle>' (or DeviceToken, FcmV1RegistrationId, PnsHandle)")
        let bytes = Array(filter.utf8)
        guard bytes.count <= 4200, let open = bytes.firstIndex(of: UInt8(ascii: "'")) else { throw refused }
        // Before the quote: `<field> eq`, separated by spaces or `+`.
        let words = bytes[..<open].split { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "+") || $0 == 9 }
            .map { String(decoding: $0, as: UTF8.self).lowercased() }
        guard words.count == 2, words[1] == "eq", Self.filterFields.contains(words[0]) else { throw refused }
        // After it: the handle up to the closing quote (`''` is a quote), then only separators.
        var handle: [UInt8] = []
        var index = open + 1
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "'") {
                if index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "'") {
                    handle.append(UInt8(ascii: "'"))
                    index += 2
                    continue
                }
                let rest = bytes[(index + 1)...]
                guard rest.allSatisfy({ $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "+") || $0 == 9 }) else {
                    throw refused
                }
                // No device has an empty handle, and herald-registration reads an empty one as no
                // filter at all: a Listen key read the hub's whole feed with `eq ''`.
                guard handle.contains(where: { $0 != UInt8(ascii: " ") && $0 != 9 }) else {
                    throw EdgeError(.badRequest, "$filter's handle is empty")
                }
                return String(decoding: handle, as: UTF8.self)
            }
            handle.append(bytes[index])
            index += 1
        }
        throw refused
    }

    static let filterFields: Set<String> = [
        "channeluri", "devicetoken", "fcmv1registrationid", "gcmregistrationid", "pnshandle",
    ]

    /// `If-Match`: absent or `*` is 0 (any); else an ETag, quoted, weak or bare.
    static func ifMatch(_ request: Request) throws -> Int64 {
        guard var value = request.headers.value(.ifMatch)?.trimmingCharacters(in: .whitespaces), value != "*" else {
            return 0
        }
        if value.hasPrefix("W/") { value.removeFirst(2) }
        value = value.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        guard let etag = Int64(value), etag > 0 else {
            throw EdgeError(.preconditionFailed, "If-Match \(value.prefix(40)) is no ETag this registration ever had")
        }
        return etag
    }

    /// A failed ETag check is 412 on these routes (FAILED_PRECONDITION is 400 elsewhere).
    static func preconditioned<T>(_ call: () async throws -> T) async throws -> T {
        do {
            return try await call()
        } catch let error as ServiceError where error.code == .failedPrecondition {
            throw EdgeError(.preconditionFailed, error.message)
        } catch let error as ServiceError where error.code == .alreadyExists {
            throw EdgeError(.conflict, error.message)
        }
    }

    static func registrationEntry(_ r: HubRegistration, request: Request) -> Response {
        let url = "\(origin(request))/\(pathHub(request))/registrations/\(r.registrationID)"
        var headers: HTTPFields = [.contentType: NHRegistrationXML.entryContentType, .eTag: "W/\"\(r.etag)\""]
        headers[.contentLocation] = url
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody(byteBuffer: ByteBuffer(string: NHRegistrationXML.entry(r, url: url))))
    }
}
