import AuthService

await AuthServer.main()
