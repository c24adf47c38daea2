// What every user of HeraldRPC needs with it (a handler's RPCContext, the method table, endpoints),
// without a second import; the transport modules are imported by name where they are used.
@_exported public import HeraldRPCCore
