from cdnlake.cli.main import main

raise SystemExit(main())
