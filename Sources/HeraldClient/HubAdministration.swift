/// What administering a hub asks of more than one service, written once for `herald hubs` and the
/// edge's `/v1/hubs`: deleting a hub, and its limits, which herald-auth (installations,
/// request rate) and herald-dispatch (pushes, concurrency, weight) keep apart.
///
/// Callers check who may do it; these only call the RPCs, in an order that a second run after a
/// crash finishes.
public enum HubAdministration {
    /// What deleting a hub removed besides its keys.
    public struct Deleted: Sendable, Equatable {
        public var devices: Int64
        public var sends: Int64
        public var cancelledSends: Int64
    }

    /// Deletes hub `name`: its keys and grants first (nothing can call it any more), then its push
    /// credentials, sends and devices, which the other services keep under its id. A hub made
    /// again under the same name gets a new id, so what follows the first step cleans up after
    /// this hub only. Errors: NOT_FOUND; FAILED_PRECONDITION for the hub default.
    public static func delete(
        name: String, auth: any AuthServiceClientProtocol, registration: any RegistrationServiceClientProtocol,
        dispatch: any DispatchServiceClientProtocol, requestID: String? = nil
    ) async throws -> (hub: Hub, deleted: Deleted) {
        let hub = try await auth.getHub(GetHubRequest(name: name), requestID: requestID)
        let deleted = try await delete(
            name: hub.name, id: hub.id, auth: auth, registration: registration, dispatch: dispatch,
            requestID: requestID)
        return (hub, deleted)
    }

    /// ``delete(name:auth:registration:dispatch:requestID:)`` of a hub the caller has just read
    /// (its stored name and its id).
    ///
    /// Once auth has deleted the hub, its name no longer leads to its id; so when a later step
    /// fails (a service restarting, say), the error names the id and the command that finishes the
    /// deletion, ``finishDelete(id:registration:dispatch:requestID:)``. Without it the hub's
    /// devices and sends would stay for good, under an id nothing could name again.
    public static func delete(
        name: String, id: String, auth: any AuthServiceClientProtocol,
        registration: any RegistrationServiceClientProtocol, dispatch: any DispatchServiceClientProtocol,
        requestID: String? = nil
    ) async throws -> Deleted {
        _ = try await auth.deleteHub(DeleteHubRequest(name: name), requestID: requestID)
        do {
            return try await finishDelete(id: id, registration: registration, dispatch: dispatch, requestID: requestID)
        } catch let error as ServiceError {
            throw unfinished(name: name, id: id, error)
        }
    }

    /// The steps of a hub's deletion after auth's, by the hub's id: its push credentials, sends
    /// and devices. Each is idempotent, so this finishes a deletion that stopped half-way, and
    /// finds nothing to do for one that did not. Errors: FAILED_PRECONDITION for the hub default.
    public static func finishDelete(
        id: String, registration: any RegistrationServiceClientProtocol, dispatch: any DispatchServiceClientProtocol,
        requestID: String? = nil
    ) async throws -> Deleted {
        guard !id.isEmpty, id != Names.defaultHub else {
            throw ServiceError.failedPrecondition("the hub default's devices and sends are not deleted whole")
        }
        _ = try await dispatch.deleteHubCredentials(DeleteHubCredentialsRequest(hub: id), requestID: requestID)
        let sends = try await dispatch.deleteHubSends(DeleteHubSendsRequest(hub: id), requestID: requestID)
        let devices = try await registration.deleteHubDevices(DeleteHubDevicesRequest(hub: id), requestID: requestID)
        return Deleted(devices: devices.deleted, sends: sends.deleted, cancelledSends: sends.cancelled)
    }

    /// The error of a deletion that stopped after auth's step: the cause, the hub's id, and how to
    /// finish.
    static func unfinished(name: String, id: String, _ error: ServiceError) -> ServiceError {
        var unfinished = error
        unfinished.message =
            "hub \(name) (id \(id)) is deleted and its keys are gone, but not yet its credentials, sends and devices "
            + "(\(error.message)); finish with: herald hubs delete --id \(id)"
        return unfinished
    }

    /// A hub's limits, each nil when unchanged (a change) or 0 for none.
    public struct Limits: Sendable, Equatable {
        public var maxInstallations: Int64?
        public var requestsPerSecond: Int64?
        public var requestBurst: Int64?
        public var pushesPerDay: Int64?
        public var pushesPerMonth: Int64?
        public var maxConcurrentPushes: Int64?
        public var weight: Int64?

        public init(
            maxInstallations: Int64? = nil, requestsPerSecond: Int64? = nil, requestBurst: Int64? = nil,
            pushesPerDay: Int64? = nil, pushesPerMonth: Int64? = nil, maxConcurrentPushes: Int64? = nil,
            weight: Int64? = nil
        ) {
            self.maxInstallations = maxInstallations
            self.requestsPerSecond = requestsPerSecond
            self.requestBurst = requestBurst
            self.pushesPerDay = pushesPerDay
            self.pushesPerMonth = pushesPerMonth
            self.maxConcurrentPushes = maxConcurrentPushes
            self.weight = weight
        }

        /// INVALID_ARGUMENT unless every value given is within ``HubLimitBounds``: checked whole
        /// before any service writes its part, so a refused change writes nothing.
        public func check() throws {
            try HubLimitBounds.check(
                maxInstallations: maxInstallations, requestsPerSecond: requestsPerSecond, requestBurst: requestBurst,
                pushesPerDay: pushesPerDay, pushesPerMonth: pushesPerMonth, maxConcurrentPushes: maxConcurrentPushes,
                weight: weight)
        }

        var changesAuth: Bool { maxInstallations != nil || requestsPerSecond != nil || requestBurst != nil }
        var changesDispatch: Bool {
            pushesPerDay != nil || pushesPerMonth != nil || maxConcurrentPushes != nil || weight != nil
        }

        /// Whether no limit is set.
        public var isEmpty: Bool { !changesAuth && !changesDispatch }

        /// The limits set, as an audit record's detail: "requestsPerSecond=7, weight=3".
        public var auditDetail: String {
            let set: [(String, Int64?)] = [
                ("maxInstallations", maxInstallations), ("requestsPerSecond", requestsPerSecond),
                ("requestBurst", requestBurst), ("pushesPerDay", pushesPerDay), ("pushesPerMonth", pushesPerMonth),
                ("maxConcurrentPushes", maxConcurrentPushes), ("weight", weight),
            ]
            return set.compactMap { name, value in value.map { "\(name)=\($0)" } }.joined(separator: ", ")
        }
    }

    /// Hub `name` and its push limits with their use so far; with `changes`, those set first
    /// (the others stay as they are: each service's limits are read, changed and written whole).
    /// Errors: NOT_FOUND; INVALID_ARGUMENT for a limit out of range (nothing of dispatch's is
    /// changed when auth's are refused).
    public static func limits(
        name: String, changing changes: Limits = Limits(), auth: any AuthServiceClientProtocol,
        dispatch: any DispatchServiceClientProtocol, requestID: String? = nil
    ) async throws -> (hub: Hub, pushes: HubPushLimits) {
        try await limits(
            of: try await auth.getHub(GetHubRequest(name: name), requestID: requestID), changing: changes, auth: auth,
            dispatch: dispatch, requestID: requestID)
    }

    /// ``limits(name:changing:auth:dispatch:requestID:)`` of a hub the caller has just read: the
    /// limits of auth's it does not change are `hub`'s.
    public static func limits(
        of hub: Hub, changing changes: Limits = Limits(), auth: any AuthServiceClientProtocol,
        dispatch: any DispatchServiceClientProtocol, requestID: String? = nil
    ) async throws -> (hub: Hub, pushes: HubPushLimits) {
        try changes.check()
        var hub = hub
        if changes.changesAuth {
            hub = try await auth.setHubLimits(
                SetHubLimitsRequest(
                    hub: hub.name, maxInstallations: changes.maxInstallations ?? hub.maxInstallations,
                    requestsPerSecond: changes.requestsPerSecond ?? hub.requestsPerSecond,
                    requestBurst: changes.requestBurst ?? hub.requestBurst),
                requestID: requestID)
        }
        let now = try await dispatch.getHubPushLimits(GetHubPushLimitsRequest(hub: hub.id), requestID: requestID)
        guard changes.changesDispatch else { return (hub, now) }
        let pushes = try await dispatch.setHubPushLimits(
            HubPushLimits(
                hub: hub.id, pushesPerDay: changes.pushesPerDay ?? now.pushesPerDay,
                pushesPerMonth: changes.pushesPerMonth ?? now.pushesPerMonth,
                maxConcurrentPushes: changes.maxConcurrentPushes ?? now.maxConcurrentPushes,
                weight: changes.weight ?? now.weight),
            requestID: requestID)
        return (hub, pushes)
    }

    /// A key as a Notification Hubs connection string: `endpoint` is the edge's address as clients
    /// reach it (`sb://host/` or `https://host/`, a trailing slash added when missing).
    public static func connectionString(endpoint: String, key: HubKey, secondary: Bool = false) -> String {
        let base = endpoint.hasSuffix("/") ? endpoint : endpoint + "/"
        return
            "Endpoint=\(base);SharedAccessKeyName=\(key.name);SharedAccessKey=\(secondary ? key.secondaryKey : key.primaryKey)"
    }
}
