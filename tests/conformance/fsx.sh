# fsx on a file in the fork mount; sourced by run.sh (uses its sf, say, pass,
# fail, $RW, $WORK, $HERE, $FSX_OPS, $FSX_SEED).
#
# fsx checks every read against its model of the file. At the end the model
# itself is written out by fsx: with `-b OPS` fsx simulates operations 1..OPS-1
# without I/O and writes their cumulative effect (its model copy) to a file on
# the native file system, then performs operation OPS for real. That file must
# equal the file in the fork before unmount, after unmount (which commits) and
# remount, and in the committed checkpoint.

say "fsx: $FSX_OPS operations, seed $FSX_SEED, on the fork mount"
mkdir -p "$RW/fsx" "$WORK/fsx-model" "$WORK/fsx-artifacts"
FSX_FILE=$RW/fsx/testfile
MODEL=$WORK/fsx-model/testfile
if fsx -f "$HERE/fsx.toml" -N "$FSX_OPS" -S "$FSX_SEED" -P "$WORK/fsx-artifacts" "$FSX_FILE" \
    >"$WORK/fsx.log" 2>&1 && grep -q 'All operations completed A-OK' "$WORK/fsx.log"; then
    say "fsx: $FSX_OPS operations completed A-OK"
    pass 1
    fsx_ok=1
else
    say "fsx FAILED; the end of its log:"
    tail -40 "$WORK/fsx.log"
    fail 1
    fsx_ok=0
fi

if [ "$fsx_ok" = 1 ]; then
    if fsx -f "$HERE/fsx.toml" -N "$FSX_OPS" -S "$FSX_SEED" -b "$FSX_OPS" "$MODEL" \
        >"$WORK/fsx-model.log" 2>&1; then
        fsx_compare() { # what
            if cmp -s "$1" "$MODEL"; then
                say "fsx: $2 equals fsx's model ($(stat -c %s "$MODEL") bytes)"
                pass 1
            else
                say "fsx: $2 DIFFERS from fsx's model: $(cmp "$1" "$MODEL" 2>&1 | head -1)"
                fail 1
            fi
        }
        fsx_compare "$FSX_FILE" "the file in the mount"
        if sf umount "$RW" && sf mount conform "$RW" -o allow_other $FORK_MOUNT_ARGS; then
            fsx_compare "$FSX_FILE" "after umount (commit) and remount, the file"
        else
            say "fsx: umount/remount failed"
            fail 1
        fi
        sf cat conform fsx/testfile >"$WORK/fsx-committed"
        fsx_compare "$WORK/fsx-committed" "the file in the committed checkpoint"
    else
        say "fsx: writing the model failed:"
        tail -20 "$WORK/fsx-model.log"
        fail 1
    fi
fi

# A second run with copy_file_range on: the fork shares committed data
# (`Share` records) and copies journal data, and a commit every second folds
# and rebases the file while fsx copies within it. fsx checks every read
# against its model; after fsx, the file must survive unmount (commit) as is.
FSX_COPY_OPS=${FSX_COPY_OPS:-$((FSX_OPS / 2))}
say "fsx: $FSX_COPY_OPS operations with copy_file_range, seed $FSX_SEED, on a fork committed every second"
sed 's/^copy_file_range = 0$/copy_file_range = 4/' "$HERE/fsx.toml" >"$WORK/fsx-copy.toml"
mkdir -p "$CP" "$WORK/fsx-copy-artifacts"
if sf fork base --name conform-copy >/dev/null && sf mount conform-copy "$CP" --commit-interval 1 $FORK_MOUNT_ARGS; then
    if fsx -f "$WORK/fsx-copy.toml" -N "$FSX_COPY_OPS" -S "$FSX_SEED" -P "$WORK/fsx-copy-artifacts" "$CP/copyfile" \
        >"$WORK/fsx-copy.log" 2>&1 && grep -q 'All operations completed A-OK' "$WORK/fsx-copy.log"; then
        say "fsx: $FSX_COPY_OPS operations with copy_file_range completed A-OK"
        pass 1
        cp "$CP/copyfile" "$WORK/fsx-copy-live"
        if sf umount "$CP" && sf cat conform-copy copyfile | cmp -s - "$WORK/fsx-copy-live"; then
            say "fsx: the copy_file_range file in the committed checkpoint equals the live one"
            pass 1
        else
            say "fsx: the copy_file_range file in the committed checkpoint DIFFERS from the live one"
            fail 1
        fi
    else
        say "fsx with copy_file_range FAILED; the end of its log:"
        tail -40 "$WORK/fsx-copy.log"
        fail 1
    fi
else
    say "fsx: could not fork and mount conform-copy"
    fail 1
fi
