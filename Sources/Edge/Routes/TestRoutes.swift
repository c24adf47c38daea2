import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import Hummingbird

/// `/v1/test/*`: what another team's integration tests need from a Herald they started
/// (docker-compose.test.yml): what would have been pushed, and a clean slate between cases.
///
/// Served only with `test-mode` on. Otherwise every `/v1/test/*` route is 404 naming the setting, so
/// a test pointed at a real deployment fails loudly instead of reading its pushes or wiping it.
/// No credentials are asked: a test stack holds nothing worth protecting, and tests in any language
/// can call these with a bare HTTP client.
struct TestRoutes: Sendable {
    let auth: any AuthServiceClientProtocol
    let registration: any RegistrationServiceClientProtocol
    let payload: any PayloadServiceClientProtocol
    let dispatch: any DispatchServiceClientProtocol
    let config: EdgeConfig

    func add(to router: Router<EdgeRequestContext>) {
        router.get("v1/test/inbox") { request, context in try await testInbox(request, context) }
        router.post("v1/test/reset") { _, context in try await testReset(context) }
    }

    private func requireTestMode() throws {
        guard config.testMode else {
            throw EdgeError(
                .notFound,
                "the test routes are off: they need herald-edge's test-mode (HERALD_TEST_MODE=true), for test stacks only"
            )
        }
    }

    /// `GET /v1/test/inbox?handle=…[&after=…&limit=…]`: what the inbox provider recorded instead of
    /// pushing, oldest first, as `{"entries":[…]}`; `handle` keeps one device's (the handle as
    /// registered), `after` only entries with a larger `sequence`, `limit` 1…1000 (100).
    func testInbox(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        try requireTestMode()
        let query = request.uri.queryParameters
        var after: Int64 = 0
        if let text = query.get("after"), text != "0" {
            guard let value = Names.positiveInteger(text) else {
                throw EdgeError(.badRequest, "after must be a sequence number (0 or more)")
            }
            after = value
        }
        var limit: Int32 = 100
        if let text = query.get("limit") {
            guard let value = Names.positiveInteger(text), value <= 1000 else {
                throw EdgeError(.badRequest, "limit must be 1 to 1000")
            }
            limit = Int32(clamping: value)
        }
        let entries = try await dispatch.listInbox(
            ListInboxRequest(
                afterSequence: after, limit: limit, handle: try EdgeHTTP.text(query.get("handle") ?? "", "handle")),
            requestID: context.requestID
        ).entries
        return try EdgeHTTP.json(TestInboxBody(entries: entries.map(InboxEntryJSON.init)))
    }

    /// `POST /v1/test/reset`: every service deletes what it owns (ResetForTests), herald-auth creates
    /// its `test-user` again. 200 with the rows deleted per service.
    func testReset(_ context: EdgeRequestContext) async throws -> Response {
        try requireTestMode()
        let id = context.requestID
        // Dispatch first: its workers stop finding deliveries before the registrations behind them go.
        let dispatch = try await dispatch.resetForTests(ResetForTestsRequest(), requestID: id).deleted
        let registration = try await registration.resetForTests(ResetForTestsRequest(), requestID: id).deleted
        let payload = try await payload.resetForTests(ResetForTestsRequest(), requestID: id).deleted
        let auth = try await auth.resetForTests(ResetForTestsRequest(), requestID: id).deleted
        return try EdgeHTTP.json([
            "deleted": ["auth": auth, "registration": registration, "payload": payload, "dispatch": dispatch]
        ])
    }
}

/// `GET /v1/test/inbox`: the entries as `herald inbox --json` prints them.
struct TestInboxBody: Encodable {
    var entries: [InboxEntryJSON]
}
