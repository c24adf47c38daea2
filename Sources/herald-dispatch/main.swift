import DispatchService

await DispatchServer.main()
