import Foundation
public import GRDB
public import HeraldModel
public import HeraldProto
import HeraldRPC
public import HeraldService

/// Registrations and NH installations, whichever database holds them: ``SQLiteRegistrationStore``
/// (embedded, one process) or ``PostgresRegistrationStore`` (shared by replicas). Every call that
/// names an id also names its owner (or hub), so another user's registration is indistinguishable
/// from a missing one.
public protocol RegistrationStore: Sendable {
    /// POST api/register: the owner's first registration for `handle` (its duplicates deleted), or a
    /// new id.
    nonisolated(nonsending) func createID(owner: String, handle: String) async throws -> String
    /// PUT api/register/{id}: replaces platform, handle and tags of a registration the owner holds.
    /// Tags must already be validated; the server's `username:` tag is added here.
    nonisolated(nonsending) func upsert(owner: String, id: String, platform: Platform, handle: String, tags: [String])
        async throws
        -> Registration
    /// DELETE api/register/{id}.
    nonisolated(nonsending) func delete(owner: String, id: String) async throws
    /// Every registration of `owner`, oldest first, with tags.
    nonisolated(nonsending) func list(owner: String) async throws -> [Registration]
    /// Push-service feedback: of the devices with `handle` on `platform` not updated after
    /// `invalidSince` (Unix ms; 0: all), installations are kept and marked `pushChannelExpired`
    /// (NH's behaviour; sends skip them until the channel changes) and tutorial and NH registrations
    /// are deleted (the tutorial app's next PUT gets 410). Returns how many.
    nonisolated(nonsending) func removeHandle(platform: Platform, handle: String, invalidSince: Int64) async throws
        -> Int
    /// Deletes ids allocated by POST that were never PUT within the pending TTL; returns how many.
    nonisolated(nonsending) func purgePending() async throws -> Int
    /// One page of an audience, by increasing id after `after`: `driver`'s index entries, or every
    /// device of the hub, filtered by `expression` (see ``RegistrationSQL``).
    nonisolated(nonsending) func audience(
        driver: String?, expression: TagExpression.Node?, platform: Platform, hub: String, templates: Bool,
        after: String, limit: Int
    ) async throws -> [Registration]

    /// Creates or replaces; keeps the row (and its id) of an existing installation. A changed push
    /// channel clears `pushChannelExpired`; the same channel keeps it. With `maxInstallations`
    /// above 0, creating one more in a hub that holds that many is RESOURCE_EXHAUSTED.
    @discardableResult
    nonisolated(nonsending) func putInstallation(hub: String, _ installation: Installation, maxInstallations: Int64)
        async throws
        -> Installation
    /// Reads, patches and writes back in one transaction.
    nonisolated(nonsending) func patchInstallation(
        hub: String, id: String, _ change: @escaping @Sendable (inout Installation) throws -> Void
    ) async throws -> Installation
    nonisolated(nonsending) func installation(hub: String, id: String) async throws -> Installation?
    /// Whether one was deleted.
    nonisolated(nonsending) func deleteInstallation(hub: String, id: String) async throws -> Bool
    /// A page of a hub's installations by installation id after `after`, filtered by a tag
    /// expression, user id and platform, evaluated in SQL.
    nonisolated(nonsending) func listInstallations(
        hub: String, expression: TagExpression?, userID: String?, platform: Platform, after: String, limit: Int
    ) async throws -> [Installation]
    /// NH registrations (``HubRegistrationRules``): creates or replaces `registration` (validated)
    /// at its id, bumping its ETag; `ifMatch` 0 matches anything, `createOnly` refuses an id in use,
    /// `maxRegistrations` above 0 bounds how many a hub holds. Returns it and whether it was created.
    nonisolated(nonsending) func putHubRegistration(
        hub: String, _ registration: HubRegistration, ifMatch: Int64, createOnly: Bool, maxRegistrations: Int64
    ) async throws -> (HubRegistration, created: Bool)
    nonisolated(nonsending) func hubRegistration(hub: String, id: String) async throws -> HubRegistration?
    /// NOT_FOUND when absent; FAILED_PRECONDITION when `ifMatch` (not 0) is not its ETag.
    nonisolated(nonsending) func deleteHubRegistration(hub: String, id: String, ifMatch: Int64) async throws
    /// A page by NH id after `after`: all of the hub's, or those with `handle`, or with `tag`.
    nonisolated(nonsending) func listHubRegistrations(
        hub: String, handle: String?, tag: String?, after: String, limit: Int
    ) async throws -> [HubRegistration]
    /// A page of every device of a hub by registration id, as NDJSON export lines.
    nonisolated(nonsending) func exportPage(hub: String, after: String, limit: Int) async throws
        -> (lines: [UInt8], last: String?, count: Int)
    /// A page of a hub's devices for an operator (ListDevices; ``RegistrationSQL/devices``), with
    /// tags and `expired`.
    nonisolated(nonsending) func devices(
        hub: String, user: String?, expression: TagExpression?, platform: Platform, handlePrefix: String?,
        after: String, limit: Int
    ) async throws -> [Registration]
    /// Erase and export: a page of the user's devices after registration id `after`, lowest id
    /// first (``RegistrationErasure`` says which are the user's); `hub` empty: every hub.
    nonisolated(nonsending) func userDevices(user: String, hub: String, after: String, limit: Int) async throws
        -> [UserDevice]
    /// Export: the user's devices whole, by registration id after `after`.
    nonisolated(nonsending) func exportUserDevices(user: String, hub: String, after: String, limit: Int) async throws
        -> [UserDeviceRecord]
    /// Erase: deletes those of `ids` still the user's, with their tags and templates.
    nonisolated(nonsending) func eraseUserDevices(user: String, hub: String, ids: [String]) async throws -> Int64
    /// Deletes every device of a hub, in batches; returns how many.
    nonisolated(nonsending) func deleteHub(_ hub: String) async throws -> Int
    /// Deletes every registration and its tags (ResetForTests).
    nonisolated(nonsending) func deleteEverything() async throws -> Int64
}

extension RegistrationStore {
    /// One page of the devices carrying `tag`, by id after `after` (keyset paging over the (tag,
    /// registration_id) key). With `templates`, installation templates instead (name and JSON).
    nonisolated(nonsending) public func audience(
        tag: String, platform: Platform, hub: String = Names.defaultHub, templates: Bool = false, after: String,
        limit: Int
    ) async throws -> [Registration] {
        try await audience(
            driver: tag, expression: nil, platform: platform, hub: hub, templates: templates, after: after, limit: limit
        )
    }

    /// One page of every device (or every installation template) of a hub: a broadcast.
    nonisolated(nonsending) public func audience(
        broadcast hub: String, platform: Platform, templates: Bool = false, after: String, limit: Int
    ) async throws -> [Registration] {
        try await audience(
            driver: nil, expression: nil, platform: platform, hub: hub, templates: templates, after: after, limit: limit
        )
    }

    /// One page of the devices matching a tag expression, evaluated in SQL over the tag index,
    /// never by loading every device: a one-tag ``TagExpression/cover`` drives the page.
    nonisolated(nonsending) public func audience(
        expression: TagExpression, platform: Platform, hub: String = Names.defaultHub, templates: Bool = false,
        after: String,
        limit: Int
    ) async throws -> [Registration] {
        if case .tag(let tag) = expression.root {
            return try await audience(
                tag: tag, platform: platform, hub: hub, templates: templates, after: after, limit: limit)
        }
        let cover = expression.cover
        return try await audience(
            driver: cover?.count == 1 ? cover?.first : nil, expression: expression.root, platform: platform, hub: hub,
            templates: templates, after: after, limit: limit)
    }

    @discardableResult
    nonisolated(nonsending) public func putInstallation(hub: String, _ installation: Installation) async throws
        -> Installation
    {
        try await putInstallation(hub: hub, installation, maxInstallations: 0)
    }
}

/// The ``RegistrationStore`` over SQLite: ``SQLiteRegistrations``' synchronous calls, run on the
/// caller's executor (in an async function GRDB's async overloads, which hop to its queue, would win).
public final class SQLiteRegistrationStore: RegistrationStore {
    public let tables: SQLiteRegistrations
    /// The tutorial's writes (POST, PUT, DELETE api/register) and NH's installation writes (PUT,
    /// PATCH, DELETE), committed in batches (see GroupCommit).
    private let commits: GroupCommit

    public init(
        db: any DatabaseWriter, pendingTTL: Duration = .seconds(24 * 3600),
        now: @escaping @Sendable () -> Int64 = unixMillis
    ) throws {
        tables = try SQLiteRegistrations(db: db, pendingTTL: pendingTTL, now: now)
        commits = GroupCommit(db)
    }

    nonisolated(nonsending) public func createID(owner: String, handle: String) async throws -> String {
        try await commits.write { [tables] db in try tables.createID(owner: owner, handle: handle, in: db) }
    }
    nonisolated(nonsending) public func upsert(
        owner: String, id: String, platform: Platform, handle: String, tags: [String]
    )
        async throws -> Registration
    {
        try await commits.write { [tables] db in
            try tables.upsert(owner: owner, id: id, platform: platform, handle: handle, tags: tags, in: db)
        }
    }
    nonisolated(nonsending) public func delete(owner: String, id: String) async throws {
        try await commits.write { [tables] db in try tables.delete(owner: owner, id: id, in: db) }
    }
    nonisolated(nonsending) public func list(owner: String) async throws -> [Registration] {
        try tables.list(owner: owner)
    }
    nonisolated(nonsending) public func removeHandle(platform: Platform, handle: String, invalidSince: Int64)
        async throws -> Int
    {
        try tables.removeHandle(platform: platform, handle: handle, invalidSince: invalidSince)
    }
    nonisolated(nonsending) public func purgePending() async throws -> Int { try tables.purgePending() }
    nonisolated(nonsending) public func audience(
        driver: String?, expression: TagExpression.Node?, platform: Platform, hub: String, templates: Bool,
        after: String, limit: Int
    ) async throws -> [Registration] {
        try tables.audience(
            RegistrationSQL.audience(
                .sqlite, driver: driver, expression: expression, platform: platform, hub: hub, templates: templates,
                after: after,
                limit: limit),
            templates: templates)
    }
    @discardableResult
    nonisolated(nonsending) public func putInstallation(
        hub: String, _ installation: Installation, maxInstallations: Int64
    )
        async throws -> Installation
    {
        try await commits.write { [tables] db in
            try tables.putInstallation(hub: hub, installation, maxInstallations: maxInstallations, in: db)
        }
    }
    nonisolated(nonsending) public func patchInstallation(
        hub: String, id: String, _ change: @escaping @Sendable (inout Installation) throws -> Void
    ) async throws -> Installation {
        try await commits.write { [tables] db in try tables.patchInstallation(hub: hub, id: id, change, in: db) }
    }
    nonisolated(nonsending) public func installation(hub: String, id: String) async throws -> Installation? {
        try tables.installation(hub: hub, id: id)
    }
    nonisolated(nonsending) public func deleteInstallation(hub: String, id: String) async throws -> Bool {
        try await commits.write { [tables] db in try tables.deleteInstallation(hub: hub, id: id, in: db) }
    }
    nonisolated(nonsending) public func listInstallations(
        hub: String, expression: TagExpression?, userID: String?, platform: Platform, after: String, limit: Int
    ) async throws -> [Installation] {
        try tables.listInstallations(
            hub: hub, expression: expression, userID: userID, platform: platform, after: after, limit: limit)
    }
    nonisolated(nonsending) public func exportPage(hub: String, after: String, limit: Int) async throws
        -> (lines: [UInt8], last: String?, count: Int)
    {
        try tables.exportPage(hub: hub, after: after, limit: limit)
    }
    nonisolated(nonsending) public func putHubRegistration(
        hub: String, _ registration: HubRegistration, ifMatch: Int64, createOnly: Bool, maxRegistrations: Int64
    ) async throws -> (HubRegistration, created: Bool) {
        try await commits.write { [tables] db in
            try tables.putHubRegistration(
                hub: hub, registration, ifMatch: ifMatch, createOnly: createOnly, maxRegistrations: maxRegistrations,
                in: db)
        }
    }
    nonisolated(nonsending) public func hubRegistration(hub: String, id: String) async throws -> HubRegistration? {
        try tables.hubRegistration(hub: hub, id: id)
    }
    nonisolated(nonsending) public func deleteHubRegistration(hub: String, id: String, ifMatch: Int64) async throws {
        try await commits.write { [tables] db in
            try tables.deleteHubRegistration(hub: hub, id: id, ifMatch: ifMatch, in: db)
        }
    }
    nonisolated(nonsending) public func listHubRegistrations(
        hub: String, handle: String?, tag: String?, after: String, limit: Int
    ) async throws -> [HubRegistration] {
        try tables.listHubRegistrations(hub: hub, handle: handle, tag: tag, after: after, limit: limit)
    }
    nonisolated(nonsending) public func devices(
        hub: String, user: String?, expression: TagExpression?, platform: Platform, handlePrefix: String?,
        after: String, limit: Int
    ) async throws -> [Registration] {
        try tables.devices(
            RegistrationSQL.devices(
                .sqlite, hub: hub, user: user, expression: expression, platform: platform, handlePrefix: handlePrefix,
                after: after,
                limit: limit))
    }
    nonisolated(nonsending) public func deleteHub(_ hub: String) async throws -> Int { try tables.deleteHub(hub) }
    nonisolated(nonsending) public func deleteEverything() async throws -> Int64 { try tables.deleteEverything() }
}
