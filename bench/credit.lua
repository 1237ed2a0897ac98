-- wrk script: POST /v1/admin/users/{id}/credit, one micro per request, each
-- with its own Idempotency-Key, counting the 201 answers.
--   CREDIT_PATH   /v1/admin/users/<id>/credit
--   CREDIT_TOKEN  an admin's token
--   CREDIT_COUNT  file that done() writes "created other" into
local threads = {}

function setup(thread)
   thread:set("id", #threads + 1)
   table.insert(threads, thread)
end

function init(args)
   created = 0
   other = 0
   counter = 0
   run = tostring(os.time())
   path = os.getenv("CREDIT_PATH")
   headers = {
      ["Authorization"] = "Bearer " .. os.getenv("CREDIT_TOKEN"),
      ["Content-Type"] = "application/json",
   }
   body = '{"amount_micros":1,"memo":"bench"}'
end

function request()
   counter = counter + 1
   headers["Idempotency-Key"] = string.format("bench-%s-%d-%d", run, id, counter)
   return wrk.format("POST", path, headers, body)
end

function response(status, headers, body)
   if status == 201 then
      created = created + 1
   else
      other = other + 1
   end
end

function done(summary, latency, requests)
   local c, o = 0, 0
   for _, t in ipairs(threads) do
      c = c + t:get("created")
      o = o + t:get("other")
   end
   local f = assert(io.open(os.getenv("CREDIT_COUNT"), "w"))
   f:write(string.format("%d %d\n", c, o))
   f:close()
end
