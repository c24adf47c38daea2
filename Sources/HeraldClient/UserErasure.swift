import Foundation

/// Erases one person's data across Herald's services, in an order that makes a second run finish
/// what a crashed one began (`herald users erase`, and a hub's `DELETE /{hub}/users/{userId}`).
///
/// Each service's part is its own idempotent RPC (EraseUser, ListUserDevices, EraseUserDevices,
/// EraseDevices); this type only calls them in order, so another service can run the same erase
/// with its own clients:
///
/// 1. auth: the account, its tokens, its lockout (account erases only);
/// 2. payload: content addressed to the user; content they sent keeps its recipients, sender
///    blanked (account erases only: content belongs to accounts, not to hubs);
/// 3. dispatch: scheduled sends to the user alone cancelled, the user's name blanked in sends;
/// 4. page by page, the user's devices: dispatch first blanks their handles in delivery records
///    and deletes their inbox entries (it answers UNAVAILABLE while a delivery to one is in
///    flight: asked again until `inFlightWait`), then registration deletes the page. Registration
///    deletes last, so a crash in between leaves the page to be found by the next run;
/// 5. dispatch again, for sends that finished while the devices went.
public enum UserErasure {
    /// What an erase removed (rows deleted) and redacted (rows kept, the user's data taken out).
    public struct Report: Sendable, Codable, Equatable {
        public var accountRows: Int64 = 0
        public var contentRemoved: Int64 = 0
        public var contentRedacted: Int64 = 0
        public var devicesRemoved: Int64 = 0
        public var deliveryRowsRemoved: Int64 = 0
        public var deliveryRowsRedacted: Int64 = 0
        public var sendRowsRemoved: Int64 = 0
        public var sendRowsRedacted: Int64 = 0

        public init() {}
    }

    /// Erases `user`: the account and everything of it when `hub` is nil; else only the devices and
    /// sends of that hub (a hub id) whose userId or `$UserId:{…}` tag is `user`.
    public static func run(
        user: String, hub: String?, auth: any AuthServiceClientProtocol,
        registration: any RegistrationServiceClientProtocol,
        payload: any PayloadServiceClientProtocol, dispatch: any DispatchServiceClientProtocol,
        pageSize: Int32 = 500, inFlightWait: Duration = .seconds(60), requestID: String? = nil
    ) async throws -> Report {
        var report = Report()
        let scope = EraseUserRequest(user: user, hub: hub ?? "")
        if hub == nil {
            report.accountRows = try await auth.eraseUser(scope, requestID: requestID).removed
            let content = try await payload.eraseUser(scope, requestID: requestID)
            report.contentRemoved = content.removed
            report.contentRedacted = content.redacted
        }
        try await eraseSends(scope, dispatch, into: &report, requestID: requestID)
        var lastPage: [String] = []
        while true {
            let page = try await registration.listUserDevices(
                ListUserDevicesRequest(user: user, hub: scope.hub, limit: pageSize), requestID: requestID
            ).devices
            if page.isEmpty { break }
            let ids = page.map(\.registrationID)
            // A page that comes back unchanged after it was deleted: something keeps it (never
            // expected); stop rather than loop.
            guard ids != lastPage else {
                throw ServiceError(.internal, "registration kept \(ids.count) devices of \(user) it was asked to erase")
            }
            lastPage = ids
            let deliveries = try await eraseDevices(page, dispatch, wait: inFlightWait, requestID: requestID)
            report.deliveryRowsRemoved += deliveries.removed
            report.deliveryRowsRedacted += deliveries.redacted
            report.devicesRemoved +=
                try await registration.eraseUserDevices(
                    EraseUserDevicesRequest(user: user, hub: scope.hub, registrationIds: ids), requestID: requestID
                ).removed
        }
        try await eraseSends(scope, dispatch, into: &report, requestID: requestID)
        return report
    }

    private static func eraseSends(
        _ scope: EraseUserRequest, _ dispatch: any DispatchServiceClientProtocol, into report: inout Report,
        requestID: String?
    ) async throws {
        let sends = try await dispatch.eraseUser(scope, requestID: requestID)
        report.sendRowsRemoved += sends.removed
        report.sendRowsRedacted += sends.redacted
    }

    /// Dispatch's part of one page, asked again while a delivery to the page is in flight (or
    /// dispatch restarts), until `wait` has passed.
    private static func eraseDevices(
        _ page: [UserDevice], _ dispatch: any DispatchServiceClientProtocol, wait: Duration, requestID: String?
    ) async throws -> EraseUserResponse {
        let deadline = ContinuousClock.now + wait
        while true {
            do {
                return try await dispatch.eraseDevices(EraseDevicesRequest(devices: page), requestID: requestID)
            } catch let error as ServiceError where error.code == .unavailable && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(200))
            }
        }
    }
}
