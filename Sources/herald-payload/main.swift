import PayloadService

await PayloadServer.main()
