import HeraldModel
public import HeraldProto

extension ReadScope {
    /// PERMISSION_DENIED unless this is READ_SCOPE_HUB. The services that hold a hub's data check
    /// it where they read it, whatever their caller decided, so that a mistake at the edge cannot
    /// widen a read.
    public func requireHub(_ read: String) throws {
        guard self == .hub else {
            throw ServiceError(.permissionDenied, "\(read) reads the whole hub: the request needs READ_SCOPE_HUB")
        }
    }
}
