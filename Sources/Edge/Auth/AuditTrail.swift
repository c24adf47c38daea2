import Foundation
import HTTPTypes
import HeraldProto
import HeraldRPC
import HeraldService
import Hummingbird
import Logging
import Metrics
import Synchronization

/// What a management route learnt of its caller and its hub while it ran, for the audit record
/// ``AuditMiddleware`` appends after it: the route knows who called (it verified them) and the
/// hub's id (it resolved it); the middleware knows the answer.
final class AuditNote: Sendable {
    struct Facts {
        var actor = ""
        var hub = ""
        var hubID = ""
        var target = ""
        var detail = ""
    }

    let facts = Mutex(Facts())
}

/// The audit note of the request being served, when its route may be audited.
enum AuditTrail {
    @TaskLocal static var note: AuditNote?

    /// The caller, once verified: "user:<name>" or "key:<key name>".
    static func caller(_ actor: String) {
        note?.facts.withLock { $0.actor = actor }
    }

    /// The hub the request changes, as resolved (a new hub's once made).
    static func hub(name: String, id: String) {
        note?.facts.withLock {
            $0.hub = name
            $0.hubID = id
        }
    }

    /// What of the hub, when the path does not name it (a key named in a form).
    static func target(_ target: String) {
        note?.facts.withLock { $0.target = target }
    }

    /// What was set (rights, limits): never a secret.
    static func detail(_ detail: String) {
        note?.facts.withLock { $0.detail = detail }
    }
}

/// Appends one audit record (herald-auth's AppendAudit) for every call of a route the rights
/// table names an audit action for (``RouteRights/Row/audit``), once its caller is known:
/// changes made, and changes refused to a verified caller (403, 400, 404), with the status
/// answered. A caller who never got past authentication leaves no record, so that strangers
/// cannot fill the trail.
///
/// Only mutating requests under the management paths get a note (a task-local box); every other
/// request pays one comparison of its method.
struct AuditMiddleware: RouterMiddleware {
    let auth: any AuthServiceClientProtocol
    static let logger = Logger(label: "herald.edge.audit")
    static let failures = Counter(label: "herald_audit_append_failures_total")

    func handle(
        _ request: Request, context: EdgeRequestContext, next: (Request, EdgeRequestContext) async throws -> Response
    ) async throws -> Response {
        guard Self.mayBeAudited(request) else { return try await next(request, context) }
        let note = AuditNote()
        let response: Response
        do {
            response = try await AuditTrail.$note.withValue(note) { try await next(request, context) }
        } catch {
            await record(request, context, note, status: EdgeError.answer(for: error)?.status.code ?? 500)
            throw error
        }
        await record(request, context, note, status: response.status.code)
        return response
    }

    /// A change (not GET or HEAD) under `/v1/hubs`, `/console/hubs` or NH's `/{hub}/users/`.
    static func mayBeAudited(_ request: Request) -> Bool {
        switch request.method {
        case .get, .head, .options: return false
        default: break
        }
        let path = request.uri.path
        return path.hasPrefix("/v1/hubs") || path.hasPrefix("/console/hubs") || path.contains("/users/")
    }

    private func record(_ request: Request, _ context: EdgeRequestContext, _ note: AuditNote, status: Int) async {
        guard let route = context.endpointPath,
            let action = RouteRights.auditActions["\(request.method) \(route)"]
        else { return }
        let facts = note.facts.withLock { $0 }
        guard !facts.actor.isEmpty else { return }
        let parameters = Self.parameters(pattern: route, path: request.uri.path)
        let hub = facts.hub.isEmpty ? parameters["hub"] ?? "" : facts.hub
        // What of the hub: the key, the platform, the user or the device the path names.
        // A person erased is named by a pseudonym only (``AuditChain/pseudonym(user:)``).
        let target =
            facts.target.isEmpty
            ? parameters["key"] ?? parameters["platform"] ?? parameters["user"].map(AuditChain.pseudonym(user:))
                ?? parameters["id"] ?? ""
            : facts.target
        let append = AppendAuditRequest(
            actor: Self.clip(facts.actor, AuditChain.maxTextBytes), action: action,
            hub: Self.clip(hub, AuditChain.maxTextBytes), hubID: Self.clip(facts.hubID, AuditChain.maxShortBytes),
            target: Self.clip(target, AuditChain.maxTextBytes),
            clientAddress: Self.clip(context.remoteIP, AuditChain.maxShortBytes), requestID: context.requestID,
            status: Int32(clamping: status), detail: Self.clip(facts.detail, AuditChain.maxTextBytes))
        do {
            _ = try await auth.appendAudit(append, requestID: context.requestID)
        } catch {
            // The change stands (it was made before); that its record is missing must be loud.
            Self.failures.increment()
            Self.logger.error(
                "audit record not appended",
                metadata: [
                    "herald.action": "\(action)", "herald.actor": "\(append.actor)", "herald.hub": "\(append.hub)",
                    "herald.target": "\(append.target)", "herald.status": "\(status)",
                    "herald.request_id": "\(context.requestID)", "herald.error": "\(error)",
                ])
        }
    }

    /// The path's values of the pattern's `{name}` segments, percent-decoded.
    static func parameters(pattern: String, path: String) -> [String: String] {
        let names = pattern.split(separator: "/", omittingEmptySubsequences: true)
        let values = path.split(separator: "/", omittingEmptySubsequences: true)
        guard names.count == values.count else { return [:] }
        var found: [String: String] = [:]
        for (name, value) in zip(names, values) where name.hasPrefix("{") && name.hasSuffix("}") {
            found[String(name.dropFirst().dropLast())] = String(value).removingPercentEncoding ?? String(value)
        }
        return found
    }

    /// `text`, cut to at most `bytes` bytes of UTF-8 at a character's end.
    static func clip(_ text: String, _ bytes: Int) -> String {
        guard text.utf8.count > bytes else { return text }
        var cut = ""
        for character in text {
            guard cut.utf8.count + character.utf8.count <= bytes else { break }
            cut.append(character)
        }
        return cut
    }
}
