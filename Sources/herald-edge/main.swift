import Edge

await EdgeServer.main()
