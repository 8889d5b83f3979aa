DELETE FROM cdnlake_daemons WHERE fleet = %(fleet)s AND daemon_id = %(daemon)s
