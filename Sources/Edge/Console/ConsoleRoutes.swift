import Crypto
import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import Hummingbird
import NIOCore

/// The operators' web console at `/console`: server-rendered HTML over the same RPCs as
/// the API routes, for users with the Manage right.
///
/// - A session is a bearer token of herald-auth (`IssueToken` at sign-in, `RevokeToken` at sign-out)
///   in an `HttpOnly`, `SameSite=Strict` cookie scoped to `/console` (`Secure` over TLS). Its expiry is
///   the token's (`token-ttl-seconds`), and revoking a user's tokens ends their sessions at once:
///   every page authenticates the token again, as the API routes do.
/// - Forms that change something carry a CSRF token derived from the session token
///   (SHA-256 of a fixed label and the token): the page can embed it, another origin cannot
///   compute it since the cookie is `HttpOnly`. The sign-in form uses a double-submit cookie.
/// - Every answer carries a strict Content-Security-Policy: scripts, styles and images from this
///   origin only; no inline script. Nothing is loaded from anywhere else.
/// - Manage on the hub "default" (the stack's admin) sees every hub, may create hubs and reads the
///   inbox; Manage on another hub sees that hub's pages only.
///
/// The routes are separate from the API's (a `/console` prefix in the same router), so the API
/// routes pay nothing for them: not a middleware, not a lookup.
struct ConsoleRoutes: Sendable {
    let users: UserAuthentication
    let auth: any AuthServiceClientProtocol
    let registration: any RegistrationServiceClientProtocol
    let dispatch: any DispatchServiceClientProtocol
    let content: ContentPush
    let config: EdgeConfig

    static let sessionCookie = "herald_session"
    static let signInCookie = "herald_signin"

    func add(to router: Router<EdgeRequestContext>) {
        let console = router.group("console")
        console.get { _, _ in ConsolePage.redirect("/console/hubs") }
        console.get("assets/console.css") { _, _ in
            ConsolePage.asset(ConsoleAssets.css, type: "text/css; charset=utf-8")
        }
        console.get("assets/console.js") { _, _ in
            ConsolePage.asset(ConsoleAssets.js, type: "text/javascript; charset=utf-8")
        }
        console.get("login") { request, _ in signInPage(request) }
        console.post("login") { request, context in
            await answer(context, session: nil) { try await signIn(request, context) }
        }
        console.post("logout") { request, context in
            await page(request, context) { try await signOut(request, context, $0) }
        }
        console.get("hubs") { request, context in await page(request, context) { try await hubsPage(context, $0) } }
        console.post("hubs") { request, context in
            await page(request, context) { try await createHub(request, context, $0) }
        }
        console.get("hubs/:hub") { request, context in
            await managedPage(request, context) { try await hubPage(context, $0, hub: $1.name) }
        }
        console.get("hubs/:hub/devices") { request, context in
            await managedPage(request, context) { try await devicesPage(request, context, $0, hub: $1) }
        }
        console.get("hubs/:hub/send") { request, context in
            await managedPage(request, context) {
                renderSend(TestSendForm(ConsolePage.query(request)), hub: $1.name, session: $0, preview: nil)
            }
        }
        console.post("hubs/:hub/send") { request, context in
            await managedPage(request, context) { try await testSend(request, context, $0, hub: $1) }
        }
        console.get("hubs/:hub/sends") { request, context in
            await managedPage(request, context) { try await sendsPage(request, context, $0, hub: $1) }
        }
        console.get("hubs/:hub/sends/:id") { request, context in
            await managedPage(request, context) { try await outcomePage(request, context, $0, hub: $1) }
        }
        addActions(to: console)
        console.get("inbox") { request, context in
            await page(request, context) { try await inboxPage(request, context, $0) }
        }
        console.get("sends/:id") { request, context in await page(request, context) { try await findSend(context, $0) }
        }
    }

    /// Runs the handler of a signed-in page: the session first (a redirect to sign-in when there is
    /// none, or when it ends during the request).
    func page(_ request: Request, _ context: EdgeRequestContext, _ body: (ConsoleSession) async throws -> Response)
        async -> Response
    {
        let session: ConsoleSession
        do {
            guard let found = try await self.session(request, context) else {
                return ConsolePage.redirect(
                    "/console/login?expired=1", clearing: request.cookies[Self.sessionCookie] != nil)
            }
            session = found
        } catch {
            return errorPage(error, context, session: nil)
        }
        return await answer(context, session: session) { try await body(session) }
    }

    /// Runs the handler of one hub's page (`:hub` in the path), for an operator who holds Manage on
    /// it, with the hub's stored name (for the page) and its id (for registration's and
    /// dispatch's calls: tenancy is by id).
    func managedPage(
        _ request: Request, _ context: EdgeRequestContext, _ body: (ConsoleSession, ConsoleHub) async throws -> Response
    ) async -> Response {
        await page(request, context) { session in
            let name = try context.parameters.require("hub")
            try await requireManage(session, hub: name, context)
            let hub = try await auth.getHub(GetHubRequest(name: name), requestID: context.requestID)
            AuditTrail.hub(name: hub.name, id: hub.id)
            return try await body(session, ConsoleHub(name: hub.name, id: hub.id))
        }
    }

    /// `body`'s answer, or its error as an HTML page with the status the API would answer (never
    /// the API's JSON); a session that ends meanwhile sends the browser to sign in again.
    func answer(_ context: EdgeRequestContext, session: ConsoleSession?, _ body: () async throws -> Response) async
        -> Response
    {
        do {
            return try await body()
        } catch let error as ServiceError where error.code == .unauthenticated && session != nil {
            return ConsolePage.redirect("/console/login?expired=1", clearing: true)
        } catch {
            return errorPage(error, context, session: session)
        }
    }

    private func errorPage(_ error: any Error, _ context: EdgeRequestContext, session: ConsoleSession?) -> Response {
        let edgeError: EdgeError =
            switch error {
            case let error as EdgeError: error
            case let error as ServiceError: EdgeError.from(error)
            default: EdgeError(.internalServerError, "internal error")
            }
        if edgeError.status == .internalServerError {
            context.logger.error("console: \(error)", metadata: ["herald.request_id": "\(context.requestID)"])
        }
        return ConsolePage.render(
            "error", title: "\(edgeError.status.code) \(edgeError.status.reasonPhrase)", session: session,
            view: ConsoleView.Error(
                status: edgeError.status.code, reason: edgeError.status.reasonPhrase, message: edgeError.message),
            status: edgeError.status)
    }

    // MARK: sessions

    /// The signed-in operator from the session cookie, or nil (no cookie, expired or revoked token).
    func session(_ request: Request, _ context: EdgeRequestContext) async throws -> ConsoleSession? {
        guard let token = request.cookies[Self.sessionCookie]?.value, !token.isEmpty, token.utf8.count <= 512 else {
            return nil
        }
        let principal: AuthenticateResponse
        do {
            principal = try await users.verdict(
                AuthenticateRequest(authorization: "Bearer \(token)", hub: Names.defaultHub),
                requestID: context.requestID)
        } catch let error as ServiceError where error.code == .unauthenticated {
            return nil
        }
        AuditTrail.caller("user:\(principal.user)")
        return ConsoleSession(
            token: token, user: principal.user, admin: principal.hubRights.contains(.manage))
    }

    /// 403 unless the operator holds Manage on `hub` (the stack's admin holds it on every hub).
    func requireManage(_ session: ConsoleSession, hub: String, _ context: EdgeRequestContext) async throws {
        if session.admin { return }
        guard try await manages(session, hub: hub, context) else {
            throw EdgeError(.forbidden, "\(session.user) does not hold the Manage right on hub \(hub)")
        }
    }

    func manages(_ session: ConsoleSession, hub: String, _ context: EdgeRequestContext) async throws -> Bool {
        if session.admin { return true }
        let principal = try await users.verdict(
            AuthenticateRequest(authorization: "Bearer \(session.token)", hub: hub), requestID: context.requestID)
        return principal.hubRights.contains(.manage)
    }

    /// The hubs `session`'s operator manages, in herald-auth's order: every hub for the stack's
    /// admin (``manages(_:hub:_:)`` answers without a call), else one verdict per hub.
    func managedHubs(_ session: ConsoleSession, _ context: EdgeRequestContext) async throws -> [Hub] {
        var managed: [Hub] = []
        for hub in try await auth.listHubs(ListHubsRequest(), requestID: context.requestID).hubs
        where try await manages(session, hub: hub.name, context) {
            managed.append(hub)
        }
        return managed
    }

    func requireAdmin(_ session: ConsoleSession) throws {
        guard session.admin else {
            throw EdgeError(.forbidden, "this needs the Manage right on the hub default (the stack's admin)")
        }
    }

    /// 403 unless the form's `_csrf` is the session's token.
    static func requireCSRF(_ form: [String: String], _ session: ConsoleSession) throws {
        guard let sent = form["_csrf"], ConsolePage.constantTimeEqual(sent, session.csrf) else {
            throw EdgeError(.forbidden, "the form's CSRF token is missing or wrong: reload the page and try again")
        }
    }

    func signInPage(_ request: Request, message: String? = nil, user: String = "", status: HTTPResponse.Status = .ok)
        -> Response
    {
        // Double-submit: the same random value in a cookie and in the form.
        let nonce = ConsolePage.randomToken()
        var response = ConsolePage.render(
            "login", title: "Sign in", session: nil,
            view: ConsoleView.Login(
                csrf: nonce, message: message?.nonEmpty, user: user,
                expired: message == nil && request.uri.queryParameters.get("expired") != nil),
            status: status)
        response.setCookie(
            Cookie(
                name: Self.signInCookie, value: nonce, maxAge: 3600, path: "/console", secure: config.httpTLS != nil,
                httpOnly: true,
                sameSite: .strict))
        return response
    }

    func signIn(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let form = try await ConsolePage.signInForm(request)
        guard let nonce = request.cookies[Self.signInCookie]?.value, let sent = form["_csrf"],
            ConsolePage.constantTimeEqual(nonce, sent)
        else {
            throw EdgeError(
                .forbidden, "the sign-in form's CSRF token is missing or wrong: reload the page and try again")
        }
        let user = form["user"] ?? ""
        let password = form["password"] ?? ""
        guard !user.isEmpty, !password.isEmpty else {
            return signInPage(request, message: "Enter a user name and a password.", user: user, status: .badRequest)
        }
        let basic = "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
        let issued: IssueTokenResponse
        do {
            issued = try await auth.issueToken(
                IssueTokenRequest(authorization: try EdgeHTTP.text(basic, "password"), clientAddress: context.remoteIP),
                requestID: context.requestID)
        } catch let error as ServiceError where error.code == .unauthenticated {
            return signInPage(request, message: "Wrong user name or password.", user: user, status: .unauthorized)
        } catch let error as ServiceError where error.code == .resourceExhausted {
            return signInPage(request, message: error.message, user: user, status: .tooManyRequests)
        }
        let session = ConsoleSession(token: issued.token, user: issued.user, admin: false)
        guard try await managesAnyHub(session, context) else {
            _ = try? await auth.revokeToken(RevokeTokenRequest(token: issued.token), requestID: context.requestID)
            return signInPage(
                request,
                message: "\(issued.user) does not hold the Manage right on any hub: the console is for operators.",
                user: user, status: .forbidden)
        }
        var response = ConsolePage.redirect("/console/hubs")
        response.setCookie(
            Cookie(
                name: Self.sessionCookie, value: issued.token,
                maxAge: Int(max(0, (issued.expiresAtUnixMs - unixMillis()) / 1000)),
                path: "/console", secure: config.httpTLS != nil, httpOnly: true, sameSite: .strict))
        response.setCookie(
            Cookie(name: Self.signInCookie, value: "", maxAge: 0, path: "/console", httpOnly: true, sameSite: .strict))
        return response
    }

    private func managesAnyHub(_ session: ConsoleSession, _ context: EdgeRequestContext) async throws -> Bool {
        // The stack's admin first: one call answers for every hub.
        if try await manages(session, hub: Names.defaultHub, context) { return true }
        for hub in try await auth.listHubs(ListHubsRequest(), requestID: context.requestID).hubs
        where hub.name != Names.defaultHub {
            if try await manages(session, hub: hub.name, context) { return true }
        }
        return false
    }

    func signOut(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession) async throws -> Response
    {
        try Self.requireCSRF(try await ConsolePage.form(request, config, session: session), session)
        _ = try await auth.revokeToken(RevokeTokenRequest(token: session.token), requestID: context.requestID)
        return ConsolePage.redirect("/console/login", clearing: true)
    }
}

/// The signed-in operator.
/// A hub as the console's pages need it: its stored name to show and link, its id for the calls.
struct ConsoleHub: Sendable, CustomStringConvertible {
    var name: String
    var id: String

    /// Its name: what a page shows wherever a hub is written out.
    var description: String { name }
}

struct ConsoleSession: Sendable {
    var token: String
    var user: String
    /// Manage on the hub "default": every hub, hub creation, the inbox.
    var admin: Bool

    /// The CSRF token of this session's forms.
    var csrf: String {
        ConsolePage.base64URL(Data(SHA256.hash(data: Data("herald-console-csrf\u{0}\(token)".utf8))))
    }
}
