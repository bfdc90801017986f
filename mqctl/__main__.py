from mqctl.app import main

main()
